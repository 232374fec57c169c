//! Leader election with a `coordination.k8s.io` Lease, so that several replicas of a role can
//! run while only one of them writes.
//!
//! [`kube_lease_manager`] takes and renews the lease. Around it, this module adds what a
//! controller needs to stay correct:
//!
//! - a follower watches the Lease, so when a leader releases it on shutdown the follower takes
//!   it over at once instead of after the lease duration;
//! - a leader checks that its renewals land: the manager retries failed renewals indefinitely
//!   and keeps calling itself the leader meanwhile, so [`Election::lost`] also ends leadership
//!   when the lease cannot be confirmed as renewed shortly before it would expire, before any
//!   follower may take it over.

use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The shortest lease accepted: the renewal margin is a third of it and must be a whole second.
pub const MIN_LEASE_SECONDS: u64 = 3;

/// How long a release on shutdown may take before the process exits anyway (the lease then
/// expires by itself).
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// Which lease to take, and as whom.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This process's holder identity; unique per process (see [`identity`]).
    pub identity: String,
    /// How long a lease lasts after its last renewal.
    pub lease: Duration,
}

impl Settings {
    /// `namespace/name`, for messages.
    pub fn lease_ref(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// How long before expiry the leader renews: a third of the lease (5 s of 15 s), so a
    /// failed renewal has time for retries.
    fn grace(&self) -> Duration {
        Duration::from_secs((self.lease.as_secs() / 3).max(1))
    }
}

/// A holder identity unique to this process: the pod's name (`POD_NAME`), else the host name,
/// then the process id and a random number, so two processes never share it even on one host
/// or in a restarted container.
pub fn identity() -> String {
    use std::hash::{BuildHasher, Hasher};
    let base = std::env::var("POD_NAME")
        .ok()
        .filter(|name| !name.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|name| name.trim().to_string())
                .filter(|name| !name.is_empty())
        })
        .or_else(|| {
            std::env::var("HOSTNAME")
                .ok()
                .filter(|name| !name.is_empty())
        })
        .unwrap_or_else(|| "compositor".to_string());
    // RandomState is seeded randomly per process: enough to tell two processes apart without
    // a random number crate.
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    format!("{base}_{}-{:08x}", std::process::id(), random as u32)
}

/// Why the election could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Lease could not be read or created (missing RBAC on `leases`, usually).
    #[error("cannot read or create lease {lease}")]
    Setup {
        /// `namespace/name`.
        lease: String,
        /// Why.
        #[source]
        source: LeaseManagerError,
    },
}

/// Why a leader stopped leading.
#[derive(Debug, thiserror::Error)]
pub enum Lost {
    /// Another process holds the lease now (this one was too slow to renew it).
    #[error("lease {lease} is held by {holder}")]
    TakenOver {
        /// `namespace/name`.
        lease: String,
        /// The new holder, if any.
        holder: String,
    },
    /// The renewal could not be confirmed before the lease's renewal deadline.
    #[error("lease {lease} could not be confirmed as renewed before its deadline")]
    NotRenewed {
        /// `namespace/name`.
        lease: String,
    },
    /// The lease manager's task ended (it should not).
    #[error("the manager of lease {lease} stopped")]
    ManagerStopped {
        /// `namespace/name`.
        lease: String,
    },
}

/// A candidate for a lease: following until [`Election::acquire`] returns, leading until
/// [`Election::lost`] does.
pub struct Election {
    settings: Settings,
    client: kube::Client,
    leases: Api<Lease>,
    /// Whether the manager holds the lease.
    leading: watch::Receiver<bool>,
    /// The manager's task; it releases the lease when `leading` is dropped.
    task: JoinHandle<Result<LeaseManager, LeaseManagerError>>,
}

impl Election {
    /// Joins the election for `settings`' lease (creating the Lease when missing); the lease
    /// is taken in the background as soon as it is free.
    pub async fn start(client: kube::Client, settings: Settings) -> Result<Self, Error> {
        let (leading, task) = watch_lease(&client, &settings).await?;
        tracing::info!(lease = %settings.lease_ref(), identity = %settings.identity, "joined the leader election");
        Ok(Election {
            leases: Api::namespaced(client.clone(), &settings.namespace),
            client,
            settings,
            leading,
            task,
        })
    }

    /// Waits until this process holds the lease.
    pub async fn acquire(&mut self) -> Result<(), Lost> {
        let fields = format!("metadata.name={}", self.settings.name);
        let mut freed = watcher(
            self.leases.clone(),
            watcher::Config::default().fields(&fields),
        )
        .backoff(super::watch_backoff())
        .boxed();
        loop {
            if *self.leading.borrow_and_update() {
                tracing::info!(lease = %self.settings.lease_ref(), identity = %self.settings.identity, "acquired the lease: leading");
                return Ok(());
            }
            tokio::select! {
                changed = self.leading.changed() => {
                    if changed.is_err() {
                        return Err(self.manager_stopped());
                    }
                }
                Some(event) = freed.next() => {
                    let free = match event {
                        Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease)) => {
                            holder(&lease).is_none()
                        }
                        _ => false,
                    };
                    if free {
                        // The manager sleeps until the old holder's lease would expire and
                        // caches what it last read; a fresh one reads the lease at once.
                        tracing::debug!(lease = %self.settings.lease_ref(), "lease released by its holder: trying to take it");
                        self.restart().await;
                    }
                }
            }
        }
    }

    /// Resolves when this process, which [acquired](Election::acquire) the lease, must stop
    /// writing: the lease went to another process, or it was not renewed in time.
    pub async fn lost(&mut self) -> Lost {
        let grace = self.settings.grace();
        let step = (grace / 4).max(Duration::from_millis(250));
        // Until the lease is read back, assume it was renewed a moment before now.
        let mut valid_until = SystemTime::now() + self.settings.lease - step;
        let mut check_at = SystemTime::now();
        loop {
            // Give up half the grace before expiry: ahead of any follower, which waits for
            // the expiry itself.
            let deadline = valid_until - grace / 2;
            let wait = check_at
                .min(deadline)
                .duration_since(SystemTime::now())
                .unwrap_or_default();
            tokio::select! {
                changed = self.leading.changed() => {
                    if changed.is_err() {
                        return self.manager_stopped();
                    }
                    if !*self.leading.borrow_and_update() {
                        let read = tokio::time::timeout(step, self.read()).await;
                        let holder = read.ok().and_then(Result::ok).flatten().and_then(|read| read.holder);
                        return self.taken_over(holder);
                    }
                }
                () = tokio::time::sleep(wait) => {
                    let left = deadline.duration_since(SystemTime::now()).unwrap_or_default();
                    match tokio::time::timeout(left.max(step), self.read()).await {
                        Ok(Ok(Some(read))) if read.holder.as_deref() == Some(&self.settings.identity) => {
                            valid_until = valid_until.max(read.valid_until);
                        }
                        Ok(Ok(Some(read))) => return self.taken_over(read.holder),
                        Ok(Ok(None)) => return self.taken_over(None),
                        Ok(Err(error)) => {
                            tracing::warn!(lease = %self.settings.lease_ref(), error = %super::error_message(&error), "cannot read the lease");
                        }
                        Err(_) => {}
                    }
                    let now = SystemTime::now();
                    if now >= valid_until - grace / 2 {
                        return Lost::NotRenewed { lease: self.settings.lease_ref() };
                    }
                    // The manager renews at `valid_until - grace`: check a moment after that,
                    // and every step while the renewal does not show.
                    check_at = (valid_until - grace + step).max(now + step);
                }
            }
        }
    }

    /// Gives the lease up (when held) so that a follower takes over at once; call after the
    /// reconciler stopped.
    pub async fn release(self) {
        let lease = self.settings.lease_ref();
        // Closing the channel makes the manager release the lease and end.
        drop(self.leading);
        match tokio::time::timeout(RELEASE_TIMEOUT, self.task).await {
            Ok(Ok(Ok(_))) => tracing::info!(%lease, "left the leader election"),
            Ok(Ok(Err(error))) => {
                tracing::warn!(%lease, error = %super::error_message(&error), "cannot release the lease; it expires by itself");
            }
            Ok(Err(_)) | Err(_) => {
                tracing::warn!(%lease, "the lease was not released in time; it expires by itself");
            }
        }
    }

    /// Replaces the manager with a fresh one (a follower's only: the old one holds nothing).
    /// Should that fail, the old one stays: it takes the lease when it expires.
    async fn restart(&mut self) {
        match watch_lease(&self.client, &self.settings).await {
            Ok((leading, task)) => {
                // Aborted rather than closed: closing makes it "release" a lease it does not
                // hold, which could clear the lock of whoever just took it.
                self.task.abort();
                self.leading = leading;
                self.task = task;
            }
            Err(error) => {
                tracing::warn!(lease = %self.settings.lease_ref(), error = %super::error_message(&error), "cannot restart the lease manager");
            }
        }
    }

    async fn read(&self) -> Result<Option<ReadLease>, kube::Error> {
        let lease = self.leases.get_opt(&self.settings.name).await?;
        Ok(lease.map(|lease| {
            let spec = lease.spec.unwrap_or_default();
            let renewed = spec
                .renew_time
                .map(|time| SystemTime::from(time.0))
                .unwrap_or(SystemTime::UNIX_EPOCH);
            let duration =
                Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64);
            ReadLease {
                holder: spec.holder_identity.filter(|holder| !holder.is_empty()),
                valid_until: renewed + duration,
            }
        }))
    }

    fn taken_over(&self, holder: Option<String>) -> Lost {
        Lost::TakenOver {
            lease: self.settings.lease_ref(),
            holder: holder.unwrap_or_else(|| "nobody".to_string()),
        }
    }

    fn manager_stopped(&self) -> Lost {
        Lost::ManagerStopped {
            lease: self.settings.lease_ref(),
        }
    }
}

/// What the leader checks in its lease.
struct ReadLease {
    holder: Option<String>,
    valid_until: SystemTime,
}

/// The holder of `lease`, if it has one.
fn holder(lease: &Lease) -> Option<&str> {
    lease
        .spec
        .as_ref()?
        .holder_identity
        .as_deref()
        .filter(|holder| !holder.is_empty())
}

type Watching = (
    watch::Receiver<bool>,
    JoinHandle<Result<LeaseManager, LeaseManagerError>>,
);

async fn watch_lease(client: &kube::Client, settings: &Settings) -> Result<Watching, Error> {
    let manager = LeaseManagerBuilder::new(client.clone(), &settings.name)
        .with_namespace(&settings.namespace)
        .with_identity(&settings.identity)
        .with_duration(settings.lease.as_secs())
        .with_grace(settings.grace().as_secs())
        .with_field_manager(format!("compositor-{}", settings.identity))
        .build()
        .await
        .map_err(|source| Error::Setup {
            lease: settings.lease_ref(),
            source,
        })?;
    Ok(manager.watch().await)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(seconds: u64) -> Settings {
        Settings {
            namespace: "ns".into(),
            name: "lease".into(),
            identity: identity(),
            lease: Duration::from_secs(seconds),
        }
    }

    #[test]
    fn renewal_leaves_a_third_of_the_lease_and_at_least_a_second() {
        assert_eq!(settings(15).grace(), Duration::from_secs(5));
        assert_eq!(settings(MIN_LEASE_SECONDS).grace(), Duration::from_secs(1));
        // The manager refuses a grace as long as the lease.
        assert!(settings(MIN_LEASE_SECONDS).grace() < settings(MIN_LEASE_SECONDS).lease);
    }

    #[test]
    fn identities_differ_between_candidates() {
        let (a, b) = (identity(), identity());
        assert_ne!(a, b);
        assert!(
            a.contains(&format!("_{}-", std::process::id())),
            "{a} names the process"
        );
    }
}
