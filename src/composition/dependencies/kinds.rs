//! The kinds a controller's compositions wait for: found in the API group of its own kind by
//! discovery, each watched into the [`Graph`] from the moment a composition first names it. A
//! kind the controller may not read yet (the operator grants it once it sees the composition
//! that names it) is watched all the same: the watch retries until it may.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::Client;
use kube::api::Api;
use kube::core::ApiResource;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::graph::{Graph, Key};
use crate::composition::cached::Cached;

/// The dependency graph of one controller, and the watches that feed it.
pub(crate) struct Dependencies {
    graph: Arc<Graph>,
    client: Client,
    own: Arc<ApiResource>,
    /// The other kinds of the group named so far, each watched.
    kinds: Mutex<HashMap<String, Arc<ApiResource>>>,
    wake: UnboundedSender<Key>,
    /// The compositions to reconcile, until the controller takes them.
    woken: Mutex<Option<UnboundedReceiver<Key>>>,
}

/// Compositions per page when a watch lists them.
const LIST_PAGE: u32 = 100;

impl Dependencies {
    /// The graph of a controller of `own`, whose client reads the other kinds.
    pub(crate) fn new(client: Client, own: &ApiResource) -> Dependencies {
        let (wake, woken) = unbounded_channel();
        Dependencies {
            graph: Arc::new(Graph::new(&own.kind)),
            client,
            own: Arc::new(own.clone()),
            kinds: Mutex::default(),
            wake,
            woken: Mutex::new(Some(woken)),
        }
    }

    /// The graph.
    pub(crate) fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Learns what an event of the controller's own watch says, and wakes whom it concerns.
    pub(crate) fn learn(&self, event: &Event<Cached>) {
        for key in self.graph.observe(&self.own.kind, event) {
            let _ = self.wake.send(key);
        }
    }

    /// The compositions to reconcile because one they wait for (or that waits for them)
    /// changed; once.
    pub(crate) fn woken(&self) -> Option<UnboundedReceiver<Key>> {
        self.woken.lock().ok()?.take()
    }

    /// The resource of composition kind `kind` in the group of the controller's own, watched
    /// from now on; `None` when the group serves no such kind.
    pub(crate) async fn resource(
        &self,
        kind: &str,
    ) -> Result<Option<Arc<ApiResource>>, kube::Error> {
        if kind == self.own.kind {
            return Ok(Some(self.own.clone()));
        }
        if let Some(known) = self.known(kind) {
            return Ok(Some(known));
        }
        let Some(resource) = discover(&self.client, &self.own.group, kind).await? else {
            return Ok(None);
        };
        let resource = Arc::new(resource);
        let Ok(mut kinds) = self.kinds.lock() else {
            return Ok(Some(resource));
        };
        if let Some(known) = kinds.get(kind) {
            return Ok(Some(known.clone()));
        }
        kinds.insert(kind.to_string(), resource.clone());
        self.spawn_watch(resource.clone());
        Ok(Some(resource))
    }

    fn known(&self, kind: &str) -> Option<Arc<ApiResource>> {
        self.kinds.lock().ok()?.get(kind).cloned()
    }

    /// Watches every composition of `resource` into the graph for as long as the controller
    /// runs.
    fn spawn_watch(&self, resource: Arc<ApiResource>) {
        let api = Api::<Cached>::all_with(self.client.clone(), &resource);
        let graph = self.graph.clone();
        let wake = self.wake.clone();
        let kind = resource.kind.clone();
        let listing = watcher::Config::default().page_size(LIST_PAGE);
        tokio::spawn(async move {
            let mut events = watcher(api, listing)
                .backoff(crate::runtime::watch_backoff())
                .boxed();
            while let Some(event) = events.next().await {
                let Ok(event) = event else { continue };
                for key in graph.observe(&kind, &event) {
                    if wake.send(key).is_err() {
                        return;
                    }
                }
            }
        });
    }
}

/// The resource of `kind` in `group`, at any version it is served at (each serves the same
/// status): the kinds of a group of generated CRDs are served at versions of their own.
pub(crate) async fn discover(
    client: &Client,
    group: &str,
    kind: &str,
) -> Result<Option<ApiResource>, kube::Error> {
    let group = kube::discovery::group(client, group).await?;
    let found = group.resources_by_stability().into_iter();
    Ok(found.map(|(resource, _)| resource).find(|r| r.kind == kind))
}
