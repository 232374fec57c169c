use serde_json::{Value, json};

use super::*;

/// An object of `api_version` and `kind` with `body` (spec, status, metadata fields).
fn object(api_version: &str, kind: &str, body: Value) -> DynamicObject {
    let mut object = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}});
    for (key, value) in body.as_object().unwrap() {
        object[key] = value.clone();
    }
    serde_json::from_value(object).unwrap()
}

/// The verdict's kind and message, as the table writes them.
fn verdict(health: Health) -> (&'static str, String) {
    match health {
        Health::Current => ("Current", String::new()),
        Health::InProgress(why) => ("InProgress", why),
        Health::Failed(why) => ("Failed", why),
    }
}

/// Each case: what is judged, the verdict, and words its message must hold.
fn check(cases: &[(&str, &str, Value, &str, &str)]) {
    for (api_version, kind, body, expected, words) in cases {
        let (got, message) = verdict(judge(&object(api_version, kind, body.clone())));
        assert_eq!(got, *expected, "{kind} {body}: {message}");
        assert!(
            message.contains(words),
            "{kind} {body}: {message:?} lacks {words:?}"
        );
    }
}

#[test]
fn deployments_are_current_once_every_replica_is_updated_available_and_ready() {
    let ready =
        json!({"replicas": 2, "updatedReplicas": 2, "availableReplicas": 2, "readyReplicas": 2});
    check(&[
        (
            "apps/v1",
            "Deployment",
            json!({"spec": {"replicas": 2}, "status": ready}),
            "Current",
            "",
        ),
        (
            "apps/v1",
            "Deployment",
            json!({"spec": {"replicas": 0}}),
            "Current",
            "",
        ),
        (
            "apps/v1",
            "Deployment",
            json!({"spec": {"replicas": 2}}),
            "InProgress",
            "0/2 updated",
        ),
        (
            "apps/v1",
            "Deployment",
            json!({"spec": {"replicas": 2}, "status": {"replicas": 2, "updatedReplicas": 2, "availableReplicas": 0}}),
            "InProgress",
            "0/2 available",
        ),
        (
            "apps/v1",
            "Deployment",
            json!({"spec": {"replicas": 2}, "status": {"replicas": 3, "updatedReplicas": 2}}),
            "InProgress",
            "1 old replicas terminating",
        ),
        (
            "apps/v1",
            "Deployment",
            json!({"metadata": {"name": "x", "generation": 3}, "spec": {"replicas": 2},
                   "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2, "readyReplicas": 2}}),
            "InProgress",
            "generation 3 not yet observed",
        ),
        (
            "apps/v1",
            "Deployment",
            json!({"spec": {"replicas": 1}, "status": {"conditions": [{"type": "Progressing", "status": "False",
                   "reason": "ProgressDeadlineExceeded", "message": "ReplicaSet \"web-1\" has timed out progressing."}]}}),
            "Failed",
            "ProgressDeadlineExceeded: ReplicaSet \"web-1\" has timed out",
        ),
    ]);
}

#[test]
fn other_workloads_wait_for_their_first_count_short_of_the_spec() {
    let set = |status: Value| json!({"spec": {"replicas": 3}, "status": status});
    check(&[
        (
            "apps/v1",
            "StatefulSet",
            set(
                json!({"replicas": 3, "readyReplicas": 3, "currentReplicas": 3,
            "updatedReplicas": 3, "currentRevision": "a", "updateRevision": "a"}),
            ),
            "Current",
            "",
        ),
        (
            "apps/v1",
            "StatefulSet",
            set(json!({"replicas": 3, "readyReplicas": 1})),
            "InProgress",
            "1/3 ready",
        ),
        (
            "apps/v1",
            "StatefulSet",
            set(
                json!({"replicas": 3, "readyReplicas": 3, "currentReplicas": 1,
            "updatedReplicas": 2, "currentRevision": "a", "updateRevision": "b"}),
            ),
            "InProgress",
            "1/3 at the current revision",
        ),
        (
            "apps/v1",
            "StatefulSet",
            set(
                json!({"replicas": 3, "readyReplicas": 3, "currentReplicas": 3,
            "updatedReplicas": 2, "currentRevision": "a", "updateRevision": "b"}),
            ),
            "InProgress",
            "2/3 at the new revision",
        ),
        (
            "apps/v1",
            "StatefulSet",
            json!({"spec": {"replicas": 3, "updateStrategy": {"type": "RollingUpdate",
            "rollingUpdate": {"partition": 2}}}, "status": {"replicas": 3, "readyReplicas": 3, "updatedReplicas": 1}}),
            "Current",
            "",
        ),
        (
            "apps/v1",
            "StatefulSet",
            json!({"spec": {"replicas": 2, "updateStrategy": {"type": "OnDelete"}}}),
            "Current",
            "",
        ),
        (
            "apps/v1",
            "DaemonSet",
            json!({"status": {}}),
            "InProgress",
            "not yet scheduled",
        ),
        (
            "apps/v1",
            "DaemonSet",
            json!({"status": {"desiredNumberScheduled": 2, "currentNumberScheduled": 2,
            "updatedNumberScheduled": 2, "numberAvailable": 1, "numberReady": 2}}),
            "InProgress",
            "1/2 available",
        ),
        (
            "apps/v1",
            "DaemonSet",
            json!({"status": {"desiredNumberScheduled": 0}}),
            "Current",
            "",
        ),
        (
            "apps/v1",
            "ReplicaSet",
            json!({"spec": {"replicas": 1}, "status": {"conditions": [{"type": "ReplicaFailure",
            "status": "True", "reason": "FailedCreate", "message": "exceeded quota"}]}}),
            "InProgress",
            "FailedCreate: exceeded quota",
        ),
        (
            "apps/v1",
            "ReplicaSet",
            json!({"spec": {"replicas": 1}, "status": {"replicas": 1, "fullyLabeledReplicas": 1,
            "availableReplicas": 1, "readyReplicas": 1}}),
            "Current",
            "",
        ),
        (
            "batch/v1",
            "Job",
            json!({"status": {"active": 1}}),
            "InProgress",
            "0 succeeded, 1 active, 0 failed",
        ),
        (
            "batch/v1",
            "Job",
            json!({"status": {"conditions": [{"type": "Complete", "status": "True"}]}}),
            "Current",
            "",
        ),
        (
            "batch/v1",
            "Job",
            json!({"status": {"conditions": [{"type": "Failed", "status": "True",
            "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]}}),
            "Failed",
            "BackoffLimitExceeded",
        ),
    ]);
}

#[test]
fn a_pod_fails_with_the_kubelets_words_when_a_container_cannot_start() {
    let waiting = |reason: &str, message: &str, restarts: i64| {
        json!({"status": {"phase": "Pending", "containerStatuses": [{"name": "app", "ready": false,
            "restartCount": restarts, "state": {"waiting": {"reason": reason, "message": message}},
            "lastState": {"terminated": {"reason": "Error", "exitCode": 2, "message": "boom\n"}}}]}})
    };
    let exec = "exec: \"/nonexistent\": stat /nonexistent: no such file or directory";
    check(&[
        (
            "v1",
            "Pod",
            waiting("RunContainerError", exec, 0),
            "Failed",
            "container app: RunContainerError: exec: \"/nonexistent\"",
        ),
        (
            "v1",
            "Pod",
            waiting(
                "ErrImageNeverPull",
                "image not present with pull policy of Never",
                0,
            ),
            "Failed",
            "container app: ErrImageNeverPull: image not present",
        ),
        (
            "v1",
            "Pod",
            waiting("ImagePullBackOff", "Back-off pulling image", 0),
            "Failed",
            "ImagePullBackOff",
        ),
        (
            "v1",
            "Pod",
            waiting("CreateContainerConfigError", "secret \"db\" not found", 0),
            "Failed",
            "secret \"db\" not found",
        ),
        (
            "v1",
            "Pod",
            waiting("CrashLoopBackOff", "back-off 40s", 2),
            "InProgress",
            "container app: CrashLoopBackOff",
        ),
        (
            "v1",
            "Pod",
            waiting("CrashLoopBackOff", "back-off 80s", 4),
            "Failed",
            "container app: CrashLoopBackOff after 4 restarts; last ended Error (exit code 2): boom",
        ),
        (
            "v1",
            "Pod",
            waiting("ContainerCreating", "", 0),
            "InProgress",
            "container app: ContainerCreating",
        ),
        (
            "v1",
            "Pod",
            json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}),
            "Current",
            "",
        ),
        (
            "v1",
            "Pod",
            json!({"status": {"phase": "Succeeded"}}),
            "Current",
            "",
        ),
        (
            "v1",
            "Pod",
            json!({"status": {"phase": "Failed", "reason": "Evicted", "message": "low on memory"}}),
            "Failed",
            "Evicted: low on memory",
        ),
        (
            "v1",
            "Pod",
            json!({"status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": "0/1 nodes are available"}]}}),
            "InProgress",
            "Unschedulable: 0/1 nodes",
        ),
        (
            "v1",
            "Pod",
            json!({"status": {"phase": "Pending", "initContainerStatuses": [{"name": "init", "ready": false,
            "state": {"waiting": {"reason": "ErrImagePull", "message": "not found"}}}]}}),
            "Failed",
            "container init: ErrImagePull",
        ),
    ]);
}

#[test]
fn objects_with_conditions_or_nothing_to_wait_for() {
    let conditions = |list: Value| json!({"status": {"conditions": list}});
    check(&[
        (
            "v1",
            "ConfigMap",
            json!({"data": {"a": "b"}}),
            "Current",
            "",
        ),
        (
            "rbac.authorization.k8s.io/v1",
            "Role",
            json!({}),
            "Current",
            "",
        ),
        (
            "example.com/v1",
            "Widget",
            conditions(json!([{"type": "Ready", "status": "True"}])),
            "Current",
            "",
        ),
        (
            "example.com/v1",
            "Widget",
            conditions(
                json!([{"type": "Ready", "status": "False", "reason": "Waiting",
            "message": "for the database"}]),
            ),
            "InProgress",
            "Waiting: for the database",
        ),
        (
            "example.com/v1",
            "Widget",
            conditions(json!([{"type": "Ready", "status": "False"},
            {"type": "Stalled", "status": "True", "reason": "InvalidSpec", "message": "size is not a size"}])),
            "Failed",
            "InvalidSpec: size is not a size",
        ),
        (
            "example.com/v1",
            "Widget",
            conditions(json!([{"type": "Reconciling", "status": "True", "reason": "Progressing"}])),
            "InProgress",
            "Progressing",
        ),
        (
            "example.com/v1",
            "Widget",
            conditions(json!([{"type": "Available", "status": "False"}])),
            "InProgress",
            "\"Available\" is \"False\"",
        ),
        (
            "example.com/v1",
            "Widget",
            json!({"metadata": {"name": "x", "deletionTimestamp": "2026-11-28T08:00:00Z"}}),
            "InProgress",
            "being deleted",
        ),
        (
            "v1",
            "PersistentVolumeClaim",
            json!({"status": {"phase": "Bound"}}),
            "Current",
            "",
        ),
        (
            "v1",
            "PersistentVolumeClaim",
            json!({"status": {"phase": "Pending"}}),
            "InProgress",
            "Pending, not yet bound",
        ),
        (
            "v1",
            "Service",
            json!({"spec": {"type": "ClusterIP"}}),
            "Current",
            "",
        ),
        (
            "v1",
            "Service",
            json!({"spec": {"type": "LoadBalancer"}, "status": {"loadBalancer": {}}}),
            "InProgress",
            "no load balancer address",
        ),
        (
            "v1",
            "Service",
            json!({"spec": {"type": "LoadBalancer"}, "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}}}),
            "Current",
            "",
        ),
        (
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            conditions(json!([{"type": "Established", "status": "True"}])),
            "Current",
            "",
        ),
        (
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            conditions(json!([{"type": "NamesAccepted", "status": "False",
            "reason": "KindConflict", "message": "kind Widget is already in use"}])),
            "Failed",
            "KindConflict",
        ),
        (
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            json!({}),
            "InProgress",
            "not yet established",
        ),
        (
            "apiregistration.k8s.io/v1",
            "APIService",
            conditions(json!([{"type": "Available", "status": "False",
            "reason": "ServiceNotFound", "message": "service/metrics-server in \"kube-system\" is not present"}])),
            "InProgress",
            "ServiceNotFound",
        ),
        (
            "apiregistration.k8s.io/v1",
            "APIService",
            conditions(json!([{"type": "Available", "status": "True"}])),
            "Current",
            "",
        ),
    ]);
}
