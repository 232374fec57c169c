//! The connections the drift watches share: HTTP/2 ones ([`crate::runtime::watch_client`]),
//! each carrying at most [`WATCHES_PER_CONNECTION`] watches of one cluster and identity.
//!
//! One watch per kind and namespace is what a controller that may read only its own
//! namespaces can have; on connections of their own (kube's client opens one per watch) a
//! thousand namespaces would hold thousands of TLS connections.

use std::sync::{Arc, Mutex};

use kube::Client;

use crate::runtime::{Metrics, WATCHES_PER_CONNECTION, watch_client};

/// The open connections, and what each was built from.
pub(super) struct Connections {
    metrics: Arc<Metrics>,
    open: Mutex<Vec<Connection>>,
}

struct Connection {
    cluster: String,
    config: Arc<kube::Config>,
    client: Client,
    /// One clone per watch on it: a watch's [`Lease`].
    watches: Arc<()>,
}

/// A watch's place on a connection, given back when the watch is dropped.
pub(super) struct Lease {
    /// The client to watch with.
    pub client: Client,
    _held: Arc<()>,
}

impl Connections {
    /// No connection yet; requests are counted in `metrics`.
    pub(super) fn new(metrics: Arc<Metrics>) -> Connections {
        Connections {
            metrics,
            open: Mutex::default(),
        }
    }

    /// A place for one more watch on `cluster`, as `config` says: on a connection built from
    /// the same config with room left, else on a new one. Connections no watch holds are
    /// closed.
    pub(super) fn lease(
        &self,
        cluster: &str,
        config: &Arc<kube::Config>,
    ) -> Result<Lease, kube::Error> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.retain(|c| Arc::strong_count(&c.watches) > 1);
        let room = open.iter().find(|c| {
            c.cluster == cluster
                && Arc::ptr_eq(&c.config, config)
                && Arc::strong_count(&c.watches) <= WATCHES_PER_CONNECTION
        });
        let connection = match room {
            Some(connection) => connection,
            None => {
                let client = watch_client(cluster, config, self.metrics.clone())?;
                open.push(Connection {
                    cluster: cluster.to_string(),
                    config: config.clone(),
                    client,
                    watches: Arc::new(()),
                });
                open.last().expect("just pushed")
            }
        };
        Ok(Lease {
            client: connection.client.clone(),
            _held: connection.watches.clone(),
        })
    }

    /// How many connections are open, for tests.
    #[cfg(test)]
    fn count(&self) -> usize {
        self.open.lock().map(|open| open.len()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(server: &str) -> Arc<kube::Config> {
        Arc::new(kube::Config::new(server.parse().unwrap()))
    }

    #[tokio::test]
    async fn a_connection_carries_a_bounded_number_of_watches_of_one_identity() {
        let connections = Connections::new(Arc::new(Metrics::default()));
        let local = config("https://127.0.0.1:6443");
        let mut leases: Vec<Lease> = (0..WATCHES_PER_CONNECTION)
            .map(|_| connections.lease("local", &local).unwrap())
            .collect();
        assert_eq!(connections.count(), 1);
        leases.push(connections.lease("local", &local).unwrap());
        assert_eq!(connections.count(), 2, "a full connection gets a sibling");

        let rotated = config("https://127.0.0.1:6443");
        let remote = connections.lease("eu-1", &rotated).unwrap();
        assert_eq!(connections.count(), 3, "another config never shares one");

        leases.truncate(WATCHES_PER_CONNECTION - 1);
        drop(remote);
        let again = connections.lease("local", &local).unwrap();
        assert_eq!(
            connections.count(),
            1,
            "connections no watch holds are closed, and freed room is used"
        );
        drop(again);
    }
}
