//! The objects compositions take values from, each watched by name (metadata only) as the
//! release identity of its namespace, so that a change reaches the compositions that read it
//! at once: one watch per object however many compositions read it, stopped when none does.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Client;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::api::SourceKind;
use crate::runtime::Metrics;

/// A composition: namespace and name.
pub(crate) type Key = (String, String);

/// An object values come from: namespace, kind and name.
type Object = (String, SourceKind, String);

/// The watches of the objects compositions take values from, and the clients they read with.
pub(crate) struct Sources {
    config: kube::Config,
    metrics: Arc<Metrics>,
    /// The release identity's client, by namespace.
    readers: Mutex<HashMap<String, Client>>,
    state: Arc<Mutex<State>>,
    wake: UnboundedSender<Key>,
    /// The compositions to reconcile, until the controller takes them.
    woken: Mutex<Option<UnboundedReceiver<Key>>>,
}

#[derive(Default)]
struct State {
    /// Each watched object, the compositions that read it and its watch.
    watched: HashMap<Object, Watched>,
    /// What each composition reads.
    named: HashMap<Key, BTreeSet<Object>>,
}

struct Watched {
    readers: BTreeSet<Key>,
    task: tokio::task::AbortHandle,
}

impl Sources {
    /// No watches yet; clients are made from `config` as each namespace's release identity.
    pub(crate) fn new(config: kube::Config, metrics: Arc<Metrics>) -> Sources {
        let (wake, woken) = unbounded_channel();
        Sources {
            config,
            metrics,
            readers: Mutex::default(),
            state: Arc::default(),
            wake,
            woken: Mutex::new(Some(woken)),
        }
    }

    /// The compositions to reconcile because an object they read changed; once.
    pub(crate) fn woken(&self) -> Option<UnboundedReceiver<Key>> {
        self.woken.lock().ok()?.take()
    }

    /// A client acting as `identity`, the release identity of `namespace`.
    pub(super) fn reader(&self, namespace: &str, identity: &str) -> Result<Client, String> {
        let mut readers = lock(&self.readers);
        if let Some(client) = readers.get(namespace) {
            return Ok(client.clone());
        }
        let mut config = self.config.clone();
        config.auth_info.impersonate = Some(identity.to_string());
        config.auth_info.impersonate_groups = None;
        let client = crate::runtime::client(config, self.metrics.clone())
            .map_err(|e| format!("no client acts as {identity}: {e}"))?;
        readers.insert(namespace.to_string(), client.clone());
        Ok(client)
    }

    /// Watches what `composition` reads, `objects` in its namespace with `client`, and stops
    /// watching what it no longer reads.
    pub(super) fn follow(
        &self,
        composition: &Key,
        objects: BTreeSet<(SourceKind, String)>,
        client: &Client,
    ) {
        let namespace = &composition.0;
        let objects: BTreeSet<Object> = objects
            .into_iter()
            .map(|(kind, name)| (namespace.clone(), kind, name))
            .collect();
        let mut state = lock(&self.state);
        let before = state.named.remove(composition).unwrap_or_default();
        for gone in before.difference(&objects) {
            unread(&mut state, gone, composition);
        }
        for object in &objects {
            let watched = state
                .watched
                .entry(object.clone())
                .or_insert_with(|| Watched {
                    readers: BTreeSet::new(),
                    task: self.spawn(object.clone(), client.clone()),
                });
            watched.readers.insert(composition.clone());
        }
        if !objects.is_empty() {
            state.named.insert(composition.clone(), objects);
        }
    }

    /// Stops watching for `composition`, which is gone.
    pub(crate) fn forget(&self, composition: &Key) {
        let mut state = lock(&self.state);
        for object in state.named.remove(composition).unwrap_or_default() {
            unread(&mut state, &object, composition);
        }
    }

    /// Watches `object` until aborted, waking its readers at each change (and once when the
    /// watch lists it, which covers a change between their read and the watch's start).
    fn spawn(&self, object: Object, client: Client) -> tokio::task::AbortHandle {
        let (namespace, kind, name) = object.clone();
        let by_name = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let events = match kind {
            SourceKind::ConfigMap => {
                let api = Api::<PartialObjectMeta<ConfigMap>>::namespaced(client, &namespace);
                watcher(api, by_name)
                    .map(|e| e.map(|e| changed(&e)))
                    .boxed()
            }
            SourceKind::Secret => {
                let api = Api::<PartialObjectMeta<Secret>>::namespaced(client, &namespace);
                watcher(api, by_name)
                    .map(|e| e.map(|e| changed(&e)))
                    .boxed()
            }
        };
        let state = self.state.clone();
        let wake = self.wake.clone();
        let task = tokio::spawn(async move {
            let mut events = events.backoff(crate::runtime::watch_backoff()).boxed();
            while let Some(event) = events.next().await {
                if !matches!(event, Ok(true)) {
                    continue;
                }
                let readers = lock(&state)
                    .watched
                    .get(&object)
                    .map(|w| w.readers.clone())
                    .unwrap_or_default();
                for reader in readers {
                    let _ = wake.send(reader);
                }
            }
        });
        task.abort_handle()
    }
}

/// Whether a watch event says the object came, changed or went.
fn changed<K>(event: &Event<K>) -> bool {
    matches!(
        event,
        Event::Apply(_) | Event::InitApply(_) | Event::Delete(_)
    )
}

/// `composition` no longer reads `object`: its watch stops once nobody does.
fn unread(state: &mut State, object: &Object, composition: &Key) {
    if let Some(watched) = state.watched.get_mut(object) {
        watched.readers.remove(composition);
        if watched.readers.is_empty() {
            watched.task.abort();
            state.watched.remove(object);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
