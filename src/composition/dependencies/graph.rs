//! Which compositions wait for which, learnt from the watch of this kind and of the kinds its
//! compositions wait for: whether each is Ready, what it waits for and where its release runs on
//! the management cluster; so which of this kind to wake when one turns Ready or stops being so
//! (its dependents) or goes (what it waited for, whose deletion may wait on it).
//!
//! A need names a kind and a name. It is the composition of that kind and name in the waiting
//! one's namespace or, when there is none, the one whose release runs in that namespace on the
//! management cluster: the composition that made the namespace, such as its Tenant.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::{Mutex, MutexGuard};

use kube::ResourceExt;
use kube::runtime::watcher::Event;

use crate::api::Dependency;
use crate::composition::cached::Cached;

/// A composition of this controller's kind, to reconcile: namespace and name.
pub(crate) type Key = (String, String);

/// A composition of any kind.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Id {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// The graph of one controller: its own kind's compositions and those of the kinds they wait
/// for.
pub(crate) struct Graph {
    kind: String,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    nodes: HashMap<Id, Node>,
    /// The compositions of each kind and name, in any namespace: where a need not met in its
    /// own namespace is looked for.
    by_name: HashMap<(String, String), BTreeSet<Id>>,
    /// While a kind's watch lists again: the compositions of it listed so far.
    relisted: HashMap<String, HashSet<Id>>,
}

#[derive(Clone, PartialEq, Eq)]
struct Node {
    /// What it waits for: kind and name.
    needs: Vec<(String, String)>,
    ready: bool,
    /// The namespaces its release is installed in on the management cluster.
    places: Vec<String>,
}

impl Graph {
    /// The graph of a controller of compositions of `kind`.
    pub(crate) fn new(kind: &str) -> Graph {
        Graph {
            kind: kind.to_string(),
            state: Mutex::default(),
        }
    }

    /// Learns what a watch event of compositions of `kind` says; the compositions of this
    /// controller's kind to reconcile for it.
    pub(crate) fn observe(&self, kind: &str, event: &Event<Cached>) -> Vec<Key> {
        let mut state = self.lock();
        let wake = match event {
            Event::Init => {
                state.relisted.insert(kind.to_string(), HashSet::new());
                Vec::new()
            }
            Event::InitApply(object) => {
                let id = id_of(kind, object);
                if let Some(listed) = state.relisted.get_mut(kind) {
                    listed.insert(id.clone());
                }
                applied(&mut state, id, object)
            }
            Event::Apply(object) => applied(&mut state, id_of(kind, object), object),
            Event::Delete(object) => gone(&mut state, &id_of(kind, object)),
            Event::InitDone => {
                let listed = state.relisted.remove(kind).unwrap_or_default();
                let missing: Vec<Id> = state
                    .nodes
                    .keys()
                    .filter(|id| id.kind == kind && !listed.contains(*id))
                    .cloned()
                    .collect();
                missing.iter().flat_map(|id| gone(&mut state, id)).collect()
            }
        };
        let mut keys: Vec<Key> = wake
            .into_iter()
            .filter(|id| id.kind == self.kind)
            .map(|id| (id.namespace, id.name))
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }

    /// The composition that `need`, of a composition in `namespace`, names, when the graph
    /// knows it.
    pub(crate) fn resolve(&self, need: &Dependency, namespace: &str) -> Option<Id> {
        resolve(&self.lock(), (&need.kind, &need.name), namespace)
    }

    /// Whether composition `id` is Ready for its current generation.
    pub(crate) fn is_ready(&self, id: &Id) -> bool {
        self.lock().nodes.get(id).is_some_and(|node| node.ready)
    }

    /// The compositions that wait for this controller's composition `name` in `namespace`.
    pub(crate) fn dependents(&self, namespace: &str, name: &str) -> Vec<Id> {
        let id = Id {
            kind: self.kind.clone(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        dependents_of(&self.lock(), &id)
    }

    /// A cycle of waits through this controller's composition `name` in `namespace`, as the
    /// compositions along it, starting and ending with it.
    pub(crate) fn cycle_through(&self, namespace: &str, name: &str) -> Option<Vec<Id>> {
        let state = self.lock();
        let start = Id {
            kind: self.kind.clone(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        let mut path = vec![start];
        let mut seen = HashSet::new();
        cycle_from(&state, &mut path, &mut seen).then_some(path)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn id_of(kind: &str, object: &Cached) -> Id {
    Id {
        kind: kind.to_string(),
        namespace: object.namespace().unwrap_or_default(),
        name: object.name_any(),
    }
}

/// A composition seen as it is now: its dependents wake when it turns Ready or stops being so,
/// or when what it waits for or where its release runs changed (a need may now name it, a
/// cycle through it may be gone); the members of a circle it closes wake too. One that merely
/// comes wakes no one else: those waiting for it learn of it when it turns Ready, which keeps a
/// waiting composition at one reconcile.
fn applied(state: &mut State, id: Id, object: &Cached) -> Vec<Id> {
    let node = Node {
        needs: object
            .needs()
            .iter()
            .filter(|d| d.namespace.as_ref().is_none_or(|n| *n == id.namespace))
            .map(|d| (d.kind.clone(), d.name.clone()))
            .collect(),
        ready: object.is_ready(),
        places: object.places().to_vec(),
    };
    // Which composition a need names may change with where its release runs: those that
    // named this one before wake too.
    let moved = state
        .nodes
        .get(&id)
        .is_some_and(|before| before.places != node.places);
    let mut wake = match moved {
        true => dependents_of(state, &id),
        false => Vec::new(),
    };
    let before = state.nodes.insert(id.clone(), node.clone());
    let same_name = (id.kind.clone(), id.name.clone());
    state
        .by_name
        .entry(same_name)
        .or_default()
        .insert(id.clone());
    // A new composition, or new needs, may close a circle: its members learn of it.
    let needs_changed = before
        .as_ref()
        .is_none_or(|before| before.needs != node.needs);
    if needs_changed {
        let mut path = vec![id.clone()];
        if cycle_from(state, &mut path, &mut HashSet::new()) {
            wake.extend(path);
        }
    }
    let turned = match &before {
        Some(before) => *before != node,
        None => node.ready || !node.places.is_empty(),
    };
    if turned {
        wake.extend(dependents_of(state, &id));
    }
    wake
}

/// A composition gone: what it waited for (whose deletion may wait on it) and those that wait
/// for it wake.
fn gone(state: &mut State, id: &Id) -> Vec<Id> {
    let Some(node) = state.nodes.get(id).cloned() else {
        return Vec::new();
    };
    let mut wake = needed_by(state, id, &node);
    wake.extend(dependents_of(state, id));
    state.nodes.remove(id);
    let same_name = (id.kind.clone(), id.name.clone());
    if let Some(same) = state.by_name.get_mut(&same_name) {
        same.remove(id);
        if same.is_empty() {
            state.by_name.remove(&same_name);
        }
    }
    wake
}

/// The composition a need for `(kind, name)` of one in `namespace` names.
fn resolve(state: &State, (kind, name): (&str, &str), namespace: &str) -> Option<Id> {
    let here = Id {
        kind: kind.to_string(),
        namespace: namespace.to_string(),
        name: name.to_string(),
    };
    if state.nodes.contains_key(&here) {
        return Some(here);
    }
    let same = state.by_name.get(&(kind.to_string(), name.to_string()))?;
    same.iter()
        .find(|id| {
            let node = state.nodes.get(*id);
            node.is_some_and(|node| node.places.iter().any(|p| p == namespace))
        })
        .cloned()
}

/// What `node` (at `id`) waits for, as far as the graph knows it.
fn needed_by(state: &State, id: &Id, node: &Node) -> Vec<Id> {
    node.needs
        .iter()
        .filter_map(|(kind, name)| resolve(state, (kind, name), &id.namespace))
        .collect()
}

/// The compositions that wait for `id`, sorted.
fn dependents_of(state: &State, id: &Id) -> Vec<Id> {
    let mut found: Vec<Id> = state
        .nodes
        .iter()
        .filter(|(other, _)| *other != id)
        .filter(|(other, node)| needed_by(state, other, node).contains(id))
        .map(|(other, _)| other.clone())
        .collect();
    found.sort();
    found
}

/// Follows the waits from the last composition of `path` back to its first, depth first;
/// `path` holds the cycle when there is one.
fn cycle_from(state: &State, path: &mut Vec<Id>, seen: &mut HashSet<Id>) -> bool {
    let at = path[path.len() - 1].clone();
    let Some(node) = state.nodes.get(&at) else {
        return false;
    };
    for next in needed_by(state, &at, node) {
        if next == path[0] {
            path.push(next);
            return true;
        }
        if !seen.insert(next.clone()) {
            continue;
        }
        path.push(next);
        if cycle_from(state, path, seen) {
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

    fn composition(kind_name: (&str, &str), needs: &[(&str, &str)], ready: bool) -> Cached {
        let (namespace, name) = kind_name;
        let needs: Vec<_> = needs
            .iter()
            .map(|(kind, name)| json!({"kind": kind, "name": name}))
            .collect();
        let status = match ready {
            true => json!({"phase": "Ready", "observedGeneration": 1}),
            false => json!({"phase": "Progressing"}),
        };
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": namespace, "generation": 1},
            "spec": {"dependsOn": needs}, "status": status,
        }))
        .unwrap()
    }

    fn app(name: &str, needs: &[&str], ready: bool) -> Cached {
        let needs: Vec<(&str, &str)> = needs.iter().map(|n| ("App", *n)).collect();
        composition(("team-a", name), &needs, ready)
    }

    fn apply(graph: &Graph, object: Cached) -> Vec<Key> {
        graph.observe("App", &Event::Apply(object))
    }

    fn names(keys: Vec<Key>) -> Vec<String> {
        keys.into_iter().map(|(_, name)| name).collect()
    }

    fn app_id(name: &str) -> Id {
        Id {
            kind: "App".into(),
            namespace: "team-a".into(),
            name: name.into(),
        }
    }

    fn path(ids: Vec<Id>) -> Vec<String> {
        ids.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn dependents_wake_when_what_they_wait_for_turns_ready_or_stops_being_so() {
        let graph = Graph::new("App");
        assert!(apply(&graph, app("web", &["db"], false)).is_empty());
        assert!(apply(&graph, app("api", &["db"], false)).is_empty());
        assert!(apply(&graph, app("db", &[], false)).is_empty());
        assert!(!graph.is_ready(&app_id("db")));
        let woken = apply(&graph, app("db", &[], true));
        assert_eq!(names(woken), ["api", "web"]);
        assert!(graph.is_ready(&app_id("db")));
        assert!(
            apply(&graph, app("db", &[], true)).is_empty(),
            "still Ready: nothing new"
        );
        let woken = apply(&graph, app("db", &[], false));
        assert_eq!(names(woken), ["api", "web"], "no longer Ready: they say so");
        assert!(
            apply(&graph, app("web", &["db"], false)).is_empty(),
            "unchanged"
        );
        assert_eq!(
            graph.dependents("team-a", "db"),
            [app_id("api"), app_id("web")]
        );
        assert!(graph.dependents("team-b", "db").is_empty());
    }

    #[test]
    fn a_deleted_composition_wakes_what_it_waited_for_and_what_waited_for_it() {
        let graph = Graph::new("App");
        apply(&graph, app("db", &[], true));
        apply(&graph, app("web", &["db"], false));
        apply(&graph, app("ui", &["web"], false));
        let woken = graph.observe("App", &Event::Delete(app("web", &["db"], false)));
        assert_eq!(names(woken), ["db", "ui"]);
        assert!(graph.dependents("team-a", "db").is_empty());
        // A relist that no longer has `api` forgets it as a deletion does.
        apply(&graph, app("api", &["db"], false));
        graph.observe("App", &Event::Init);
        graph.observe("App", &Event::InitApply(app("db", &[], true)));
        graph.observe("App", &Event::InitApply(app("ui", &["web"], false)));
        assert_eq!(names(graph.observe("App", &Event::InitDone)), ["db"]);
        assert!(graph.dependents("team-a", "db").is_empty());
    }

    #[test]
    fn cycles_are_found_through_each_member() {
        let graph = Graph::new("App");
        apply(&graph, app("c1", &["c2"], false));
        apply(&graph, app("c2", &["c3"], false));
        assert_eq!(graph.cycle_through("team-a", "c1"), None);
        let woken = apply(&graph, app("c3", &["c1"], false));
        assert_eq!(
            names(woken),
            ["c1", "c2", "c3"],
            "each member learns of the circle"
        );
        assert_eq!(
            path(graph.cycle_through("team-a", "c2").unwrap()),
            [
                "App team-a/c2",
                "App team-a/c3",
                "App team-a/c1",
                "App team-a/c2"
            ]
        );
        assert!(graph.cycle_through("team-a", "c1").is_some());
        // Breaking it wakes the one waiting on the member that changed.
        let woken = apply(&graph, app("c3", &[], false));
        assert_eq!(names(woken), ["c2"]);
        assert_eq!(graph.cycle_through("team-a", "c1"), None);
        let two = Graph::new("App");
        apply(&two, app("a", &["b", "a"], false));
        assert_eq!(two.cycle_through("team-a", "a").unwrap().len(), 2);
    }

    /// A Tenant `team-a` in namespace `platform` whose release runs in `places`.
    fn tenant(places: &[&str], ready: bool, needs: &[(&str, &str)]) -> Cached {
        let mut tenant = serde_json::to_value(json!({
            "metadata": {"name": "team-a", "namespace": "platform", "generation": 1},
            "spec": {"dependsOn": needs.iter().map(|(k, n)| json!({"kind": k, "name": n}))
                                       .collect::<Vec<_>>()},
            "status": {"phase": if ready { "Ready" } else { "Progressing" },
                       "observedGeneration": 1,
                       "clusters": places.iter().map(|p| json!({"name": "local",
                           "namespace": p, "revision": 1})).collect::<Vec<_>>()},
        }))
        .unwrap();
        // A release on another cluster names no namespace here.
        tenant["status"]["clusters"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "edge", "namespace": "team-b", "revision": 1}));
        serde_json::from_value(tenant).unwrap()
    }

    #[test]
    fn another_kind_is_found_in_the_namespace_or_as_the_one_whose_release_runs_there() {
        let graph = Graph::new("App");
        let needs_tenant = composition(("team-a", "web"), &[("Tenant", "team-a")], false);
        assert!(apply(&graph, needs_tenant).is_empty());
        let need = Dependency {
            kind: "Tenant".into(),
            name: "team-a".into(),
            namespace: None,
        };
        assert_eq!(graph.resolve(&need, "team-a"), None, "not seen yet");
        let woken = graph.observe("Tenant", &Event::Apply(tenant(&[], false, &[])));
        assert!(woken.is_empty(), "its release runs nowhere yet");
        assert_eq!(graph.resolve(&need, "team-a"), None);
        let woken = graph.observe("Tenant", &Event::Apply(tenant(&["team-a"], false, &[])));
        assert_eq!(names(woken), ["web"], "it now runs in web's namespace");
        let id = graph.resolve(&need, "team-a").unwrap();
        assert_eq!(id.to_string(), "Tenant platform/team-a");
        assert!(!graph.is_ready(&id));
        let woken = graph.observe("Tenant", &Event::Apply(tenant(&["team-a"], true, &[])));
        assert_eq!(names(woken), ["web"]);
        assert!(graph.is_ready(&id));
        assert_eq!(graph.resolve(&need, "team-b"), None, "only on this cluster");
        assert_eq!(graph.resolve(&need, "team-c"), None);
        // One of that kind and name in the namespace itself comes first.
        let here = composition(("team-a", "team-a"), &[], false);
        graph.observe("Tenant", &Event::Apply(here));
        assert_eq!(
            graph.resolve(&need, "team-a").unwrap().to_string(),
            "Tenant team-a/team-a"
        );
    }

    #[test]
    fn a_cycle_through_another_kind_is_found() {
        let graph = Graph::new("App");
        apply(
            &graph,
            composition(("team-a", "web"), &[("Tenant", "team-a")], false),
        );
        let tenant = tenant(&["team-a"], false, &[("App", "web")]);
        graph.observe("Tenant", &Event::Apply(tenant));
        // The Tenant's need is resolved from its own namespace, where no App `web` is.
        assert_eq!(graph.cycle_through("team-a", "web"), None);
        let graph = Graph::new("App");
        apply(
            &graph,
            composition(("team-a", "web"), &[("Tenant", "base")], false),
        );
        let base = composition(("team-a", "base"), &[("App", "web")], false);
        graph.observe("Tenant", &Event::Apply(base));
        assert_eq!(
            path(graph.cycle_through("team-a", "web").unwrap()),
            ["App team-a/web", "Tenant team-a/base", "App team-a/web"]
        );
    }
}
