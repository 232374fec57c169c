//! What the watches have learned of the health of each release: only the objects that are not
//! Current, each with its verdict, and the Pods not Current in the namespaces watched for them,
//! so that a healthy fleet costs nothing to remember. A workload not Current is told about
//! through its Pods (found by its selector): a Pod that failed fails its workload, in the
//! kubelet's words.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Mutex, RwLock};

use kube::core::DynamicObject;
use serde_json::Value;

use super::{Health, judge, judged};
use crate::api::Checks;
use crate::rbac::kinds::WORKLOADS;

/// A release on a cluster: (cluster, release namespace, release name).
pub(in crate::composition) type ReleaseKey = (String, String, String);

/// How a release is doing, from what its objects say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::composition) enum Verdict {
    /// Every object is Current.
    Healthy,
    /// Objects are on their way: the first of them, and what each waits for.
    Progressing(String),
    /// An object failed: which, and why.
    Unhealthy(String),
}

/// The objects of releases that are not Current, and the Pods that are not.
#[derive(Default)]
pub(in crate::composition) struct View {
    inner: Mutex<Inner>,
    /// The definition's checks, which judge their kinds in place of the built-in rules.
    checks: RwLock<Checks>,
}

#[derive(Default)]
struct Inner {
    /// Per release, by UID.
    unwell: HashMap<ReleaseKey, BTreeMap<String, Unwell>>,
    /// Per (cluster, namespace), by UID.
    pods: HashMap<(String, String), HashMap<String, UnwellPod>>,
}

/// An object not Current.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Unwell {
    /// `Kind namespace/name`.
    description: String,
    /// `group/Kind`, so that a relist of the kind finds what it no longer shows.
    kind: String,
    namespace: Option<String>,
    name: String,
    health: Health,
    /// A workload's Pod selector.
    selector: Option<Selector>,
    /// Its resourceVersion as a number, so that an event older than a read is not taken.
    version: u64,
}

impl Unwell {
    /// Whether `other` says the same of the object, at whatever version.
    fn same_as(&self, other: &Unwell) -> bool {
        (&self.health, &self.selector, &self.description)
            == (&other.health, &other.selector, &other.description)
    }
}

/// A Pod not Current.
#[derive(Clone, Debug, PartialEq, Eq)]
struct UnwellPod {
    name: String,
    labels: BTreeMap<String, String>,
    health: Health,
}

/// How many objects a Progressing message names.
const NAMED: usize = 3;

impl View {
    /// Judges from now on with `checks`: what was judged with others is judged again as its
    /// watch lists it again.
    pub(in crate::composition) fn use_checks(&self, checks: Checks) {
        *self.checks.write().unwrap_or_else(|p| p.into_inner()) = checks;
    }

    /// Whether objects of `(group, kind)` have a status that says how they are doing, by a
    /// built-in rule or a check.
    pub(in crate::composition) fn judged(&self, group: &str, kind: &str) -> bool {
        judged(group, kind) || self.checks().covers(group, kind)
    }

    fn checks(&self) -> std::sync::RwLockReadGuard<'_, Checks> {
        self.checks.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Judges `object` on `cluster`; the release whose health it changes, if any.
    pub(in crate::composition) fn saw(
        &self,
        cluster: &str,
        object: &DynamicObject,
    ) -> Option<ReleaseKey> {
        let (namespace, name) = crate::helm::release_of(object.metadata.annotations.as_ref())?;
        let release = (cluster.to_string(), namespace, name);
        let uid = object.metadata.uid.clone().unwrap_or_default();
        let version = version_of(object);
        let health = judge(object, &self.checks());
        let mut inner = lock(&self.inner);
        let objects = inner.unwell.entry(release.clone()).or_default();
        if objects
            .get(&uid)
            .is_some_and(|known| known.version > version)
        {
            return None;
        }
        let changed = match health {
            Health::Current => objects.remove(&uid).is_some(),
            health => {
                let unwell = Unwell {
                    description: describe(object),
                    kind: kind_of(object),
                    namespace: object.metadata.namespace.clone(),
                    name: object.metadata.name.clone().unwrap_or_default(),
                    health,
                    selector: Selector::of_workload(object),
                    version,
                };
                let before = objects.insert(uid, unwell.clone());
                before.is_none_or(|before| !before.same_as(&unwell))
            }
        };
        if objects.is_empty() {
            inner.unwell.remove(&release);
        }
        changed.then_some(release)
    }

    /// The object `uid` on `cluster` is gone; the release whose health that changes, if any.
    pub(in crate::composition) fn gone(&self, cluster: &str, uid: &str) -> Option<ReleaseKey> {
        let mut inner = lock(&self.inner);
        let release = inner
            .unwell
            .iter_mut()
            .find(|(key, objects)| key.0 == cluster && objects.contains_key(uid))
            .map(|(key, objects)| {
                objects.remove(uid);
                key.clone()
            })?;
        if inner.unwell.get(&release).is_some_and(BTreeMap::is_empty) {
            inner.unwell.remove(&release);
        }
        Some(release)
    }

    /// The objects of `kind` (`group/Kind`) on `cluster` that a relist `scope`d by namespace
    /// and name did not show again are gone; the releases whose health that changes.
    pub(in crate::composition) fn relisted(
        &self,
        cluster: &str,
        kind: &str,
        scope: impl Fn(Option<&str>, &str) -> bool,
        relisted: &HashSet<String>,
    ) -> Vec<ReleaseKey> {
        let mut inner = lock(&self.inner);
        let mut changed = Vec::new();
        for (release, objects) in inner.unwell.iter_mut() {
            let before = objects.len();
            objects.retain(|uid, object| {
                let watched = release.0 == cluster
                    && object.kind == kind
                    && scope(object.namespace.as_deref(), &object.name);
                !watched || relisted.contains(uid)
            });
            if objects.len() != before {
                changed.push(release.clone());
            }
        }
        inner.unwell.retain(|_, objects| !objects.is_empty());
        changed
    }

    /// Judges the Pod `pod` on `cluster`; the releases whose workloads it changes.
    pub(in crate::composition) fn pod(
        &self,
        cluster: &str,
        pod: &DynamicObject,
    ) -> Vec<ReleaseKey> {
        let metadata = &pod.metadata;
        let place = (
            cluster.to_string(),
            metadata.namespace.clone().unwrap_or_default(),
        );
        let uid = metadata.uid.clone().unwrap_or_default();
        let labels: BTreeMap<String, String> = metadata.labels.clone().unwrap_or_default();
        let health = judge(pod, &self.checks());
        let mut inner = lock(&self.inner);
        let pods = inner.pods.entry(place.clone()).or_default();
        let changed = match health {
            Health::Current => pods.remove(&uid).is_some(),
            health => {
                let unwell = UnwellPod {
                    name: metadata.name.clone().unwrap_or_default(),
                    labels: labels.clone(),
                    health,
                };
                pods.insert(uid, unwell.clone()).as_ref() != Some(&unwell)
            }
        };
        if pods.is_empty() {
            inner.pods.remove(&place);
        }
        match changed {
            true => inner.owners_of(&place, &labels),
            false => Vec::new(),
        }
    }

    /// The Pods on `cluster` in `namespace` (every namespace when `None`) that a relist did not
    /// show again are gone; the releases whose workloads that changes.
    pub(in crate::composition) fn pods_relisted(
        &self,
        cluster: &str,
        namespace: Option<&str>,
        relisted: &HashSet<String>,
    ) -> Vec<ReleaseKey> {
        let mut inner = lock(&self.inner);
        let mut gone = Vec::new();
        for ((on, in_namespace), pods) in inner.pods.iter_mut() {
            if on != cluster || namespace.is_some_and(|n| n != in_namespace) {
                continue;
            }
            pods.retain(|uid, pod| {
                let kept = relisted.contains(uid);
                if !kept {
                    gone.push(((on.clone(), in_namespace.clone()), pod.labels.clone()));
                }
                kept
            });
        }
        inner.pods.retain(|_, pods| !pods.is_empty());
        let mut releases: Vec<ReleaseKey> = gone
            .iter()
            .flat_map(|(place, labels)| inner.owners_of(place, labels))
            .collect();
        releases.sort();
        releases.dedup();
        releases
    }

    /// The Pod `uid` on `cluster` is gone; the releases whose workloads that changes.
    pub(in crate::composition) fn pod_gone(&self, cluster: &str, uid: &str) -> Vec<ReleaseKey> {
        let mut inner = lock(&self.inner);
        let found = inner
            .pods
            .iter_mut()
            .filter(|((on, _), _)| on == cluster)
            .find_map(|(place, pods)| pods.remove(uid).map(|pod| (place.clone(), pod.labels)));
        inner.pods.retain(|_, pods| !pods.is_empty());
        match found {
            Some((place, labels)) => inner.owners_of(&place, &labels),
            None => Vec::new(),
        }
    }

    /// How `release` is doing, from the objects of it not Current and their Pods.
    pub(in crate::composition) fn verdict(&self, release: &ReleaseKey) -> Verdict {
        let inner = lock(&self.inner);
        let Some(objects) = inner.unwell.get(release) else {
            return Verdict::Healthy;
        };
        let mut objects: Vec<&Unwell> = objects.values().collect();
        objects.sort_by(|a, b| a.description.cmp(&b.description));
        let mut progressing = Vec::new();
        for object in objects {
            let pods = inner.pods_of(&release.0, object);
            let failed_pod = pods.iter().find(|p| matches!(p.health, Health::Failed(_)));
            match (&object.health, failed_pod) {
                (Health::Failed(why), _) => {
                    return Verdict::Unhealthy(format!("{}: {why}", object.description));
                }
                (_, Some(pod)) => {
                    let why = pod.health.message();
                    let description = &object.description;
                    return Verdict::Unhealthy(format!("{description}: pod {}: {why}", pod.name));
                }
                (health, None) => {
                    let mut waits = format!("{}: {}", object.description, health.message());
                    if let Some(pod) = pods.first() {
                        let why = pod.health.message();
                        waits.push_str(&format!("; pod {}: {why}", pod.name));
                    }
                    progressing.push(waits);
                }
            }
        }
        let more = progressing.len().saturating_sub(NAMED);
        progressing.truncate(NAMED);
        let mut message = progressing.join("; ");
        if more > 0 {
            message.push_str(&format!(" (and {more} more)"));
        }
        match message.is_empty() {
            true => Verdict::Healthy,
            false => Verdict::Progressing(message),
        }
    }

    /// Forgets what is known of `release` (uninstalled).
    pub(in crate::composition) fn forget(&self, release: &ReleaseKey) {
        lock(&self.inner).unwell.remove(release);
    }
}

impl Inner {
    /// The releases with a workload not Current at `place` whose selector matches `labels`.
    fn owners_of(
        &self,
        (cluster, namespace): &(String, String),
        labels: &BTreeMap<String, String>,
    ) -> Vec<ReleaseKey> {
        let owns = |object: &Unwell| {
            object.namespace.as_ref() == Some(namespace)
                && object.selector.as_ref().is_some_and(|s| s.matches(labels))
        };
        self.unwell
            .iter()
            .filter(|(key, objects)| &key.0 == cluster && objects.values().any(owns))
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// The Pods not Current of the workload `object` on `cluster`, by name.
    fn pods_of(&self, cluster: &str, object: &Unwell) -> Vec<&UnwellPod> {
        let (Some(selector), Some(namespace)) = (&object.selector, &object.namespace) else {
            return Vec::new();
        };
        let place = (cluster.to_string(), namespace.clone());
        let in_place = self.pods.get(&place).into_iter().flat_map(HashMap::values);
        let mut pods: Vec<&UnwellPod> = in_place
            .filter(|pod| selector.matches(&pod.labels))
            .collect();
        pods.sort_by(|a, b| a.name.cmp(&b.name));
        pods
    }
}

/// A workload's Pod selector: `matchLabels` and `matchExpressions`, as Kubernetes reads them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Selector {
    labels: BTreeMap<String, String>,
    expressions: Vec<(String, String, Vec<String>)>,
}

/// Whether `(group, kind)` is a workload, whose Pods say why it does not come up.
pub(in crate::composition) fn runs_pods(group: &str, kind: &str) -> bool {
    WORKLOADS.iter().any(|&(g, k, _)| (g, k) == (group, kind))
}

impl Selector {
    /// The selector of `object`, when it is a workload that has one.
    pub(super) fn of_workload(object: &DynamicObject) -> Option<Selector> {
        let types = object.types.as_ref()?;
        let group = types.api_version.rsplit_once('/').map_or("", |(g, _)| g);
        if !runs_pods(group, &types.kind) {
            return None;
        }
        Selector::parse(&object.data["spec"]["selector"])
    }

    fn parse(selector: &Value) -> Option<Selector> {
        let labels = serde_json::from_value(selector["matchLabels"].clone()).unwrap_or_default();
        let expressions = selector["matchExpressions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                let values = e["values"].as_array().into_iter().flatten();
                (
                    e["key"].as_str().unwrap_or_default().to_string(),
                    e["operator"].as_str().unwrap_or_default().to_string(),
                    values
                        .filter_map(|v| v.as_str().map(String::from))
                        .collect(),
                )
            })
            .collect();
        Some(Selector {
            labels,
            expressions,
        })
    }

    /// Whether a Pod with `labels` is selected.
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let exact = self.labels.iter().all(|(k, v)| labels.get(k) == Some(v));
        exact
            && self.expressions.iter().all(|(key, operator, values)| {
                let value = labels.get(key);
                match operator.as_str() {
                    "In" => value.is_some_and(|v| values.contains(v)),
                    "NotIn" => value.is_none_or(|v| !values.contains(v)),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    _ => false,
                }
            })
    }
}

/// `Kind namespace/name`, or `Kind name`.
fn describe(object: &DynamicObject) -> String {
    let kind = object.types.as_ref().map_or("", |t| t.kind.as_str());
    let name = object.metadata.name.as_deref().unwrap_or_default();
    match &object.metadata.namespace {
        Some(namespace) => format!("{kind} {namespace}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// `group/Kind` of `object`.
pub(in crate::composition) fn kind_of(object: &DynamicObject) -> String {
    let types = object.types.as_ref();
    let group = types
        .and_then(|t| t.api_version.rsplit_once('/'))
        .map_or("", |(g, _)| g);
    format!("{group}/{}", types.map_or("", |t| t.kind.as_str()))
}

/// An object's resourceVersion as a number (0 when it is not one).
fn version_of(object: &DynamicObject) -> u64 {
    let version = object.metadata.resource_version.as_deref();
    version.and_then(|v| v.parse().ok()).unwrap_or_default()
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
