//! What the reconciles of both roles share: each one timed and counted, apply and cleanup
//! behind the finalizer with their own errors unwrapped, and a failure logged by whether only a
//! change of the object can help.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{self, Event, finalizer};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Metrics, ReconcileOutcome, error_message};

/// What the shared reconcile plumbing needs of a role's error.
pub trait ReconcileError: std::error::Error + Send + Sync + Sized + 'static {
    /// Whether only a change of the object can help, so that the failure is expected.
    fn is_terminal(&self) -> bool;
    /// The finalizer's own failure (adding or removing it), as the role reports it.
    fn from_finalizer(error: finalizer::Error<Self>) -> Self;
}

/// Runs `reconcile`, counting its outcome and time in the metrics.
pub async fn timed<T, E>(
    metrics: &Metrics,
    reconcile: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let started = Instant::now();
    let result = reconcile.await;
    let outcome = match result {
        Ok(_) => ReconcileOutcome::Success,
        Err(_) => ReconcileOutcome::Error,
    };
    metrics.reconciled(outcome, started.elapsed());
    result
}

/// Applies or cleans up `object` behind finalizer `name`; a failed apply or cleanup is its own
/// error, not the finalizer's.
pub async fn finalized<K, E, F>(
    api: &Api<K>,
    name: &str,
    object: Arc<K>,
    reconcile: impl FnOnce(Event<K>) -> F,
) -> Result<Action, E>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
    F: Future<Output = Result<Action, E>>,
    E: ReconcileError,
{
    finalizer(api, name, object, reconcile)
        .await
        .map_err(|error| match error {
            finalizer::Error::ApplyFailed(error) | finalizer::Error::CleanupFailed(error) => error,
            other => E::from_finalizer(other),
        })
}

/// Logs a failed reconcile of `kind` object `name`: waiting for a change (info) when only a change
/// can help, else failed (warn), with the error's sources on one line.
pub fn log_failure(kind: &str, name: &str, error: &impl ReconcileError) {
    let message = error_message(error);
    if error.is_terminal() {
        tracing::info!(object = %format_args!("{kind}/{name}"), error = %message, "waiting for a change");
    } else {
        tracing::warn!(object = %format_args!("{kind}/{name}"), error = %message, "reconcile failed");
    }
}

/// Drains a controller's results: a reconcile's failure was logged by its error policy, so
/// what the controller itself reports is kept at debug.
pub async fn drain<T, E: std::fmt::Display>(results: impl Stream<Item = Result<T, E>>) {
    results
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "reconcile ended with an error");
            }
        })
        .await;
}
