//! Workloads, by their replica counts and conditions as kstatus reads them: the first count
//! short of the spec is what the workload still waits for. Why a replica does not come up is
//! its Pods' to tell (`pods.rs`).

use serde_json::Value;

use super::{Health, condition, count, said};

/// A Deployment: every replica updated, available and ready, and no old one left; a rollout past
/// its progress deadline has Failed.
pub(super) fn deployment(spec: &Value, status: &Value) -> Health {
    if let Some(progressing) = condition(status, "Progressing")
        && progressing["reason"] == "ProgressDeadlineExceeded"
    {
        return Health::Failed(said(progressing));
    }
    let wanted = count(&spec["replicas"], 1);
    let replicas = count(&status["replicas"], 0);
    let updated = count(&status["updatedReplicas"], 0);
    let available = count(&status["availableReplicas"], 0);
    let ready = count(&status["readyReplicas"], 0);
    // Why replicas are missing, when its ReplicaSet cannot create them (a quota, an admission
    // refusal): the counts alone would not say.
    let failure = condition(status, "ReplicaFailure").filter(|c| c["status"] == "True");
    let why = failure
        .map(|c| format!("; {}", said(c)))
        .unwrap_or_default();
    if wanted > updated {
        return Health::InProgress(format!("{updated}/{wanted} updated{why}"));
    }
    if replicas > wanted {
        return Health::InProgress(format!("{} old replicas terminating", replicas - wanted));
    }
    if wanted > available {
        return Health::InProgress(format!("{available}/{wanted} available{why}"));
    }
    if wanted > ready {
        return Health::InProgress(format!("{ready}/{wanted} ready"));
    }
    Health::Current
}

/// A StatefulSet rolled out as its update strategy says: every replica ready and at the update
/// revision, or, under a partition, those above it updated. `OnDelete` waits for no one.
pub(super) fn stateful_set(spec: &Value, status: &Value) -> Health {
    let strategy = &spec["updateStrategy"];
    if strategy["type"] == "OnDelete" {
        return Health::Current;
    }
    let wanted = count(&spec["replicas"], 1);
    let replicas = count(&status["replicas"], 0);
    let ready = count(&status["readyReplicas"], 0);
    let current = count(&status["currentReplicas"], 0);
    let updated = count(&status["updatedReplicas"], 0);
    let partition = count(&strategy["rollingUpdate"]["partition"], 0);
    if wanted > replicas {
        return Health::InProgress(format!("{replicas}/{wanted} replicas"));
    }
    if wanted > ready {
        return Health::InProgress(format!("{ready}/{wanted} ready"));
    }
    if replicas > wanted {
        return Health::InProgress(format!("{} extra replicas terminating", replicas - wanted));
    }
    if partition > 0 {
        let due = (wanted - partition).max(0);
        return match updated < due {
            true => Health::InProgress(format!("{updated}/{due} updated above the partition")),
            false => Health::Current,
        };
    }
    if wanted > current {
        return Health::InProgress(format!("{current}/{wanted} at the current revision"));
    }
    if status["updateRevision"] != status["currentRevision"] {
        return Health::InProgress(format!("{updated}/{wanted} at the new revision"));
    }
    Health::Current
}

/// A DaemonSet: on every node it should run on, scheduled, updated, available and ready.
pub(super) fn daemon_set(status: &Value) -> Health {
    let Some(desired) = status["desiredNumberScheduled"].as_i64() else {
        return Health::InProgress("not yet scheduled".into());
    };
    let counts = [
        ("currentNumberScheduled", "scheduled"),
        ("updatedNumberScheduled", "updated"),
        ("numberAvailable", "available"),
        ("numberReady", "ready"),
    ];
    for (field, what) in counts {
        let have = count(&status[field], 0);
        if desired > have {
            return Health::InProgress(format!("{have}/{desired} {what}"));
        }
    }
    Health::Current
}

/// A ReplicaSet: every replica labelled, available and ready; one its controller cannot create
/// (a quota, an admission refusal) says why.
pub(super) fn replica_set(spec: &Value, status: &Value) -> Health {
    if let Some(failure) = condition(status, "ReplicaFailure").filter(|c| c["status"] == "True") {
        return Health::InProgress(said(failure));
    }
    let wanted = count(&spec["replicas"], 1);
    let counts = [
        ("fullyLabeledReplicas", "labelled"),
        ("availableReplicas", "available"),
        ("readyReplicas", "ready"),
    ];
    for (field, what) in counts {
        let have = count(&status[field], 0);
        if wanted > have {
            return Health::InProgress(format!("{have}/{wanted} {what}"));
        }
    }
    let replicas = count(&status["replicas"], 0);
    if replicas > wanted {
        return Health::InProgress(format!("{} extra replicas terminating", replicas - wanted));
    }
    Health::Current
}

/// A Job: Current once Complete, Failed once Failed (or about to be: `FailureTarget`).
pub(super) fn job(status: &Value) -> Health {
    for failed in ["Failed", "FailureTarget"] {
        if let Some(condition) = condition(status, failed).filter(|c| c["status"] == "True") {
            return Health::Failed(said(condition));
        }
    }
    if condition(status, "Complete").is_some_and(|c| c["status"] == "True") {
        return Health::Current;
    }
    Health::InProgress(format!(
        "{} succeeded, {} active, {} failed",
        count(&status["succeeded"], 0),
        count(&status["active"], 0),
        count(&status["failed"], 0)
    ))
}
