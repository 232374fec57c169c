//! Whether an object a release keeps does what its spec asks, judged from the object alone as
//! kstatus (Flux's and kubectl's judge) judges it: Current, InProgress or Failed, with a short
//! message that names what is missing (`0/2 available`) or what went wrong, in the kubelet's or
//! the controller's own words.
//!
//! Each kind's rule is in one place: workloads (`workloads.rs`), Pods (`pods.rs`), and here the
//! rest: objects with standard conditions, CRDs, APIServices, PersistentVolumeClaims and
//! Services of type LoadBalancer. An object with no status to judge is Current once it exists.
//! `cases.json` holds, kind by kind, the objects the unit test judges and the verdict each gets.

mod pods;
mod record;
mod view;
mod workloads;

pub(super) use record::{due_in, of_release, unknown, with_health};
pub(super) use view::{ReleaseKey, Verdict, View, runs_pods};

#[cfg(test)]
mod tests;

use kube::core::DynamicObject;
use serde_json::Value;

use crate::api::{Check, Checks};

/// How an object is doing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// As its spec asks: available, bound, established, complete, or nothing to wait for.
    Current,
    /// On its way: what it still waits for.
    InProgress(String),
    /// Stopped short, and will not get there by itself: why, in its controller's or the
    /// kubelet's words.
    Failed(String),
}

impl Health {
    /// What it waits for or why it failed; nothing when Current.
    pub fn message(&self) -> &str {
        match self {
            Health::Current => "",
            Health::InProgress(message) | Health::Failed(message) => message,
        }
    }
}

/// How `object` is doing, from its kind, spec and status: by the definition's check of its
/// kind (`checks`) where there is one, else by the kind's built-in rule.
pub fn judge(object: &DynamicObject, checks: &Checks) -> Health {
    if object.metadata.deletion_timestamp.is_some() {
        return Health::InProgress("being deleted".into());
    }
    let (api_version, kind) = object
        .types
        .as_ref()
        .map_or(("", ""), |t| (t.api_version.as_str(), t.kind.as_str()));
    let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
    let spec = &object.data["spec"];
    let status = &object.data["status"];
    if let Some(observed) = status["observedGeneration"].as_i64()
        && let Some(generation) = object.metadata.generation
        && observed < generation
    {
        return Health::InProgress(format!(
            "generation {generation} not yet observed (at {observed})"
        ));
    }
    match checks.judge(group, kind, object) {
        Some(Check::Ready) => return Health::Current,
        Some(Check::Waiting(why)) => return Health::InProgress(why),
        Some(Check::Failed(why)) => return Health::Failed(why),
        None => {}
    }
    match (group, kind) {
        ("apps", "Deployment") => workloads::deployment(spec, status),
        ("apps", "StatefulSet") => workloads::stateful_set(spec, status),
        ("apps", "DaemonSet") => workloads::daemon_set(status),
        ("apps", "ReplicaSet") => workloads::replica_set(spec, status),
        ("batch", "Job") => workloads::job(status),
        ("", "Pod") => pods::pod(status),
        ("", "PersistentVolumeClaim") => claim(status),
        ("", "Service") => service(spec, status),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => definition(status),
        ("apiregistration.k8s.io", "APIService") => api_service(status),
        _ => by_conditions(status),
    }
}

/// Kinds with no status to judge, Current once they exist: their watches read metadata only
/// (never a Secret's data).
const STATUSLESS: [(&str, &str); 21] = [
    ("", "ConfigMap"),
    ("", "Secret"),
    ("", "ServiceAccount"),
    ("", "Endpoints"),
    ("", "LimitRange"),
    ("", "ResourceQuota"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("networking.k8s.io", "NetworkPolicy"),
    ("networking.k8s.io", "Ingress"),
    ("networking.k8s.io", "IngressClass"),
    ("policy", "PodDisruptionBudget"),
    ("scheduling.k8s.io", "PriorityClass"),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    ),
    ("autoscaling", "HorizontalPodAutoscaler"),
    ("batch", "CronJob"),
    ("storage.k8s.io", "StorageClass"),
    ("discovery.k8s.io", "EndpointSlice"),
];

/// Whether objects of `(group, kind)` have a status that says how they are doing, by a
/// built-in rule.
fn judged(group: &str, kind: &str) -> bool {
    !STATUSLESS.contains(&(group, kind))
}

/// The condition of `type_` in `status.conditions`, if there is one.
fn condition<'a>(status: &'a Value, type_: &str) -> Option<&'a Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// Whether the condition of `type_` has `value` (`"True"`, `"False"`).
fn condition_is(status: &Value, type_: &str, value: &str) -> bool {
    condition(status, type_).is_some_and(|c| c["status"] == value)
}

/// A condition's reason and message, as one line: `Reason: message`.
fn said(condition: &Value) -> String {
    let reason = condition["reason"].as_str().unwrap_or_default();
    let message = condition["message"].as_str().unwrap_or_default();
    match (reason.is_empty(), message.is_empty()) {
        (false, false) => format!("{reason}: {message}"),
        (false, true) => reason.to_string(),
        (true, false) => message.to_string(),
        (true, true) => format!("{} is {}", condition["type"], condition["status"]),
    }
}

/// An integer field, or `default` when it is absent.
fn count(value: &Value, default: i64) -> i64 {
    value.as_i64().unwrap_or(default)
}

/// Any other object, by the conditions most controllers write: `Stalled` (Failed),
/// `Reconciling`, then `Ready` and `Available`; none of them, or no status, is Current.
fn by_conditions(status: &Value) -> Health {
    if let Some(stalled) = condition(status, "Stalled").filter(|c| c["status"] == "True") {
        return Health::Failed(said(stalled));
    }
    if let Some(reconciling) = condition(status, "Reconciling").filter(|c| c["status"] == "True") {
        return Health::InProgress(said(reconciling));
    }
    for type_ in ["Ready", "Available"] {
        if let Some(not) = condition(status, type_).filter(|c| c["status"] != "True") {
            return Health::InProgress(said(not));
        }
    }
    Health::Current
}

/// A PersistentVolumeClaim is Current once Bound; a Lost one has Failed.
fn claim(status: &Value) -> Health {
    match status["phase"].as_str().unwrap_or("Pending") {
        "Bound" => Health::Current,
        "Lost" => Health::Failed("Lost: its volume is gone".into()),
        phase => Health::InProgress(format!("{phase}, not yet bound")),
    }
}

/// A Service of type LoadBalancer is Current once it has an address; any other at once.
fn service(spec: &Value, status: &Value) -> Health {
    let ingress = status["loadBalancer"]["ingress"].as_array();
    match spec["type"] == "LoadBalancer" && ingress.is_none_or(Vec::is_empty) {
        true => Health::InProgress("no load balancer address yet".into()),
        false => Health::Current,
    }
}

/// A CRD is Current once Established; names another CRD holds fail it.
fn definition(status: &Value) -> Health {
    if let Some(names) = condition(status, "NamesAccepted").filter(|c| c["status"] == "False") {
        return Health::Failed(said(names));
    }
    match condition_is(status, "Established", "True") {
        true => Health::Current,
        false => Health::InProgress("not yet established".into()),
    }
}

/// An APIService is Current once Available (its Service answers).
fn api_service(status: &Value) -> Health {
    match condition(status, "Available") {
        Some(available) if available["status"] == "True" => Health::Current,
        Some(available) => Health::InProgress(said(available)),
        None => Health::InProgress("availability not yet known".into()),
    }
}
