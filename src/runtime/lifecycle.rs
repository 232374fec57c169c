//! How a role runs: until the shutdown signal, while it leads (when it elects), and for a
//! bounded grace period after the signal.

use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};

use super::leader::{Election, Lost};

/// Why a role stopped reconciling other than by the shutdown signal.
#[derive(Debug, thiserror::Error)]
pub enum Stopped {
    /// The election failed before this process ever led.
    #[error("waiting for the leader lease")]
    NeverLed(#[source] Lost),
    /// Another process took the lease.
    #[error("lost the leader lease")]
    LostLease(#[source] Lost),
}

/// Resolves on SIGTERM or Ctrl-C, in every clone: the metrics server, the election and the
/// reconciler all stop on the one signal.
pub type Shutdown = Shared<BoxFuture<'static, ()>>;

/// The process's shutdown signal. Its handler is installed at once, so a signal that comes
/// before anything awaits it (while following, say) is not lost.
pub fn shutdown() -> Shutdown {
    let shutdown = super::shutdown_signal().boxed().shared();
    tokio::spawn(shutdown.clone());
    shutdown
}

/// Runs the reconciler until `shutdown`: at once without an election; with one, only after
/// this process acquired the lease, and never after it lost it.
///
/// `/readyz` stays ready while following: a standby is healthy, and a rolling update of a
/// single-replica Deployment would otherwise wait forever for a new pod that cannot lead until
/// the old one goes. A lost lease ends the process with an error at once (as controller-runtime
/// does): the reconciler is dropped mid-flight, killing its Helm children, and Kubernetes
/// restarts the container as a fresh candidate. On shutdown the reconciler finishes first, then
/// the lease is released so that a standby takes over without waiting for it to expire.
pub async fn reconcile_while_leading<F>(
    election: Option<Election>,
    shutdown: Shutdown,
    reconciler: impl FnOnce(Shutdown) -> F,
) -> Result<(), Stopped>
where
    F: std::future::Future<Output = ()>,
{
    let Some(mut election) = election else {
        within_grace(reconciler(shutdown.clone()), shutdown).await;
        return Ok(());
    };
    let acquired = tokio::select! {
        acquired = election.acquire() => Some(acquired),
        () = shutdown.clone() => None,
    };
    match acquired {
        None => {
            election.release().await;
            return Ok(());
        }
        Some(Err(lost)) => return Err(Stopped::NeverLed(lost)),
        Some(Ok(())) => {}
    }
    let lost = tokio::select! {
        () = within_grace(reconciler(shutdown.clone()), shutdown) => None,
        lost = election.lost() => Some(lost),
    };
    match lost {
        None => {
            election.release().await;
            Ok(())
        }
        Some(lost) => {
            tracing::error!(error = %lost, "lost the leader lease: stopping at once so that only the new leader writes");
            Err(Stopped::LostLease(lost))
        }
    }
}

/// How long reconciles may go on after the shutdown signal; a kubelet waits 30 s by default,
/// and the leader lease is released after them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

/// Runs `reconciler` until it ends, or [`SHUTDOWN_GRACE`] after `shutdown` at the latest: a
/// reconciler whose watches never started (its CRD missing, say) never finishes a graceful
/// shutdown by itself, and would hold the process, and its lease, until it is killed.
async fn within_grace(reconciler: impl std::future::Future<Output = ()>, shutdown: Shutdown) {
    tokio::pin!(reconciler);
    tokio::select! {
        () = &mut reconciler => return,
        () = shutdown => {}
    }
    if tokio::time::timeout(SHUTDOWN_GRACE, reconciler)
        .await
        .is_err()
    {
        tracing::warn!(grace = ?SHUTDOWN_GRACE, "reconciles still running after the grace period; stopping them");
    }
}
