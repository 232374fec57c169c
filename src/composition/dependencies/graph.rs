//! Which compositions of this kind wait for which, learnt from the watch of the kind: whether
//! each is Ready, what it waits for, and so which to wake when one turns Ready or stops being
//! so (its dependents) or goes (what it waited for, whose deletion may wait on it).

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};

use kube::ResourceExt;
use kube::runtime::watcher::Event;

use crate::composition::cached::Cached;

/// A composition: namespace and name.
pub(crate) type Key = (String, String);

/// The graph of one composition kind.
pub(crate) struct Graph {
    kind: String,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    nodes: HashMap<Key, Node>,
    /// While the watch lists again: the compositions listed so far.
    relisted: Option<HashSet<Key>>,
}

#[derive(Clone, PartialEq, Eq)]
struct Node {
    /// The names of the compositions of this kind in its namespace it waits for.
    needs: Vec<String>,
    ready: bool,
}

impl Graph {
    /// The graph of compositions of `kind`.
    pub(crate) fn new(kind: &str) -> Graph {
        Graph {
            kind: kind.to_string(),
            state: Mutex::default(),
        }
    }

    /// Learns what a watch event says; the compositions to reconcile for it.
    pub(crate) fn observe(&self, event: &Event<Cached>) -> Vec<Key> {
        let mut state = self.lock();
        match event {
            Event::Init => {
                state.relisted = Some(HashSet::new());
                Vec::new()
            }
            Event::InitApply(object) => {
                let key = key_of(object);
                if let Some(listed) = state.relisted.as_mut() {
                    listed.insert(key);
                }
                self.applied(&mut state, object)
            }
            Event::Apply(object) => self.applied(&mut state, object),
            Event::Delete(object) => {
                let key = key_of(object);
                let gone = state.nodes.remove(&key);
                gone.map(|node| needed_by(&key, &node)).unwrap_or_default()
            }
            Event::InitDone => {
                let listed = state.relisted.take().unwrap_or_default();
                let gone: Vec<Key> = state
                    .nodes
                    .keys()
                    .filter(|key| !listed.contains(*key))
                    .cloned()
                    .collect();
                let mut wake = Vec::new();
                for key in gone {
                    if let Some(node) = state.nodes.remove(&key) {
                        wake.extend(needed_by(&key, &node));
                    }
                }
                wake
            }
        }
    }

    /// An object seen as it is now: its dependents wake when it turns Ready or stops being so,
    /// or when what it waits for changed (a cycle through it may be gone).
    fn applied(&self, state: &mut State, object: &Cached) -> Vec<Key> {
        let key = key_of(object);
        let namespace = &key.0;
        let needs = object
            .needs()
            .iter()
            .filter(|d| d.kind == self.kind)
            .filter(|d| d.namespace.as_ref().is_none_or(|n| n == namespace))
            .map(|d| d.name.clone())
            .collect();
        let node = Node {
            needs,
            ready: object.is_ready(),
        };
        let before = state.nodes.insert(key.clone(), node.clone());
        let turned = match &before {
            Some(before) => before.ready != node.ready || before.needs != node.needs,
            None => node.ready,
        };
        match turned {
            true => dependents_in(state, &key),
            false => Vec::new(),
        }
    }

    /// Whether composition `name` in `namespace` is Ready for its current generation.
    pub(crate) fn is_ready(&self, namespace: &str, name: &str) -> bool {
        let key = (namespace.to_string(), name.to_string());
        self.lock().nodes.get(&key).is_some_and(|node| node.ready)
    }

    /// The compositions in `namespace` that wait for `name`, by name.
    pub(crate) fn dependents(&self, namespace: &str, name: &str) -> Vec<String> {
        let key = (namespace.to_string(), name.to_string());
        let state = self.lock();
        dependents_in(&state, &key)
            .into_iter()
            .map(|(_, name)| name)
            .collect()
    }

    /// A cycle of waits through `name` in `namespace`, as the names along it, starting and
    /// ending with `name`.
    pub(crate) fn cycle_through(&self, namespace: &str, name: &str) -> Option<Vec<String>> {
        let state = self.lock();
        let mut path = vec![name.to_string()];
        let mut seen = HashSet::new();
        cycle_from(&state, namespace, name, &mut path, &mut seen).then_some(path)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn key_of(object: &Cached) -> Key {
    (object.namespace().unwrap_or_default(), object.name_any())
}

/// The compositions `node` (at `key`) waits for.
fn needed_by(key: &Key, node: &Node) -> Vec<Key> {
    let namespace = &key.0;
    node.needs
        .iter()
        .map(|name| (namespace.clone(), name.clone()))
        .collect()
}

/// The compositions that wait for `key`, sorted.
fn dependents_in(state: &State, key: &Key) -> Vec<Key> {
    let mut found: Vec<Key> = state
        .nodes
        .iter()
        .filter(|(other, node)| other.0 == key.0 && *other != key && node.needs.contains(&key.1))
        .map(|(other, _)| other.clone())
        .collect();
    found.sort();
    found
}

/// Follows the waits from the last name of `path` back to its first, depth first; `path` holds
/// the cycle when there is one.
fn cycle_from(
    state: &State,
    namespace: &str,
    at: &str,
    path: &mut Vec<String>,
    seen: &mut HashSet<String>,
) -> bool {
    let key = (namespace.to_string(), at.to_string());
    let Some(node) = state.nodes.get(&key) else {
        return false;
    };
    for next in &node.needs {
        if *next == path[0] {
            path.push(next.clone());
            return true;
        }
        if !seen.insert(next.clone()) {
            continue;
        }
        path.push(next.clone());
        if cycle_from(state, namespace, next, path, seen) {
            return true;
        }
        path.pop();
    }
    false
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn app(name: &str, needs: &[&str], ready: bool) -> Cached {
        let needs: Vec<_> = needs
            .iter()
            .map(|n| json!({"kind": "App", "name": n}))
            .collect();
        let status = match ready {
            true => json!({"phase": "Ready", "observedGeneration": 1}),
            false => json!({"phase": "Progressing"}),
        };
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "team-a", "generation": 1},
            "spec": {"dependsOn": needs}, "status": status,
        }))
        .unwrap()
    }

    fn names(keys: Vec<Key>) -> Vec<String> {
        keys.into_iter().map(|(_, name)| name).collect()
    }

    #[test]
    fn dependents_wake_when_what_they_wait_for_turns_ready_or_stops_being_so() {
        let graph = Graph::new("App");
        assert!(
            graph
                .observe(&Event::Apply(app("web", &["db"], false)))
                .is_empty()
        );
        assert!(
            graph
                .observe(&Event::Apply(app("api", &["db"], false)))
                .is_empty()
        );
        assert!(
            graph
                .observe(&Event::Apply(app("db", &[], false)))
                .is_empty()
        );
        assert!(!graph.is_ready("team-a", "db"));
        let woken = graph.observe(&Event::Apply(app("db", &[], true)));
        assert_eq!(names(woken), ["api", "web"]);
        assert!(graph.is_ready("team-a", "db"));
        assert!(
            graph
                .observe(&Event::Apply(app("db", &[], true)))
                .is_empty(),
            "still Ready: nothing new"
        );
        let woken = graph.observe(&Event::Apply(app("db", &[], false)));
        assert_eq!(names(woken), ["api", "web"], "no longer Ready: they say so");
        let web = app("web", &["db"], false);
        assert!(graph.observe(&Event::Apply(web)).is_empty(), "unchanged");
        assert_eq!(graph.dependents("team-a", "db"), ["api", "web"]);
        assert!(graph.dependents("team-b", "db").is_empty());
    }

    #[test]
    fn a_deleted_dependent_wakes_what_it_waited_for() {
        let graph = Graph::new("App");
        graph.observe(&Event::Apply(app("db", &[], true)));
        graph.observe(&Event::Apply(app("web", &["db"], false)));
        let woken = graph.observe(&Event::Delete(app("web", &["db"], false)));
        assert_eq!(names(woken), ["db"]);
        assert!(graph.dependents("team-a", "db").is_empty());
        // A relist that no longer has `api` forgets it as a deletion does.
        graph.observe(&Event::Apply(app("api", &["db"], false)));
        graph.observe(&Event::Init);
        graph.observe(&Event::InitApply(app("db", &[], true)));
        assert_eq!(names(graph.observe(&Event::InitDone)), ["db"]);
        assert!(graph.dependents("team-a", "db").is_empty());
    }

    #[test]
    fn cycles_are_found_through_each_member_and_other_kinds_are_not_followed() {
        let graph = Graph::new("App");
        graph.observe(&Event::Apply(app("c1", &["c2"], false)));
        graph.observe(&Event::Apply(app("c2", &["c3"], false)));
        assert_eq!(graph.cycle_through("team-a", "c1"), None);
        let woken = graph.observe(&Event::Apply(app("c3", &["c1"], false)));
        assert!(woken.is_empty(), "new, not a change");
        assert_eq!(
            graph.cycle_through("team-a", "c2").unwrap(),
            ["c2", "c3", "c1", "c2"]
        );
        assert!(graph.cycle_through("team-a", "c1").is_some());
        // Breaking it wakes the one waiting on the member that changed.
        let woken = graph.observe(&Event::Apply(app("c3", &[], false)));
        assert_eq!(names(woken), ["c2"]);
        assert_eq!(graph.cycle_through("team-a", "c1"), None);
        let two = Graph::new("App");
        two.observe(&Event::Apply(app("a", &["b", "a"], false)));
        assert_eq!(two.cycle_through("team-a", "a").unwrap(), ["a", "a"]);
        let other_kind: Cached = serde_json::from_value(json!({
            "metadata": {"name": "x", "namespace": "team-a"},
            "spec": {"dependsOn": [{"kind": "Tenant", "name": "x"}]},
        }))
        .unwrap();
        let graph = Graph::new("App");
        graph.observe(&Event::Apply(other_kind));
        assert_eq!(graph.cycle_through("team-a", "x"), None);
    }
}
