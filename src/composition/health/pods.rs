//! Pods, by their phase, conditions and containers: a container that cannot be created, started
//! or pulled, or that crash-loops, fails its Pod with the kubelet's own words, so that the
//! workload it belongs to can say why it does not come up.

use serde_json::Value;

use super::{Health, condition, condition_is, count};

/// Reasons a container waits for that it will not get past by itself: its image cannot be had,
/// or it cannot be created or started as specified.
const STUCK: [&str; 9] = [
    "ImagePullBackOff",
    "ErrImagePull",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "PreStartHookError",
    "PostStartHookError",
];

/// Restarts past which a container in `CrashLoopBackOff` has failed rather than is starting.
const CRASH_LOOP_RESTARTS: i64 = 3;

/// A Pod: Current once Ready (or Succeeded), Failed once Failed or when a container is stuck or
/// crash-loops; otherwise what it waits for.
pub(super) fn pod(status: &Value) -> Health {
    match status["phase"].as_str().unwrap_or("Pending") {
        "Succeeded" => return Health::Current,
        "Failed" => {
            let reason = status["reason"].as_str().unwrap_or("Failed");
            let message = status["message"]
                .as_str()
                .unwrap_or("its containers failed");
            return Health::Failed(format!("{reason}: {message}"));
        }
        _ => {}
    }
    let containers = ["initContainerStatuses", "containerStatuses"]
        .iter()
        .flat_map(|field| status[field].as_array().into_iter().flatten());
    let mut waiting = None;
    for container in containers {
        if let Some(failed) = failed_container(container) {
            return Health::Failed(failed);
        }
        if waiting.is_none() && container["ready"] != true {
            waiting = container_waiting(container);
        }
    }
    if condition_is(status, "Ready", "True") {
        return Health::Current;
    }
    if let Some(unscheduled) = condition(status, "PodScheduled").filter(|c| c["status"] == "False")
    {
        return Health::InProgress(super::said(unscheduled));
    }
    Health::InProgress(waiting.unwrap_or_else(|| "not yet ready".into()))
}

/// Why `container` has failed, if it has: a wait it will not get past, or a crash loop past
/// [`CRASH_LOOP_RESTARTS`] (also while it runs, not ready, between two crashes) with how it
/// last ended. The restart count is left out of the words, so that each restart is not a new
/// status.
fn failed_container(container: &Value) -> Option<String> {
    let name = container["name"].as_str().unwrap_or_default();
    let waiting = &container["state"]["waiting"];
    let reason = waiting["reason"].as_str();
    if let Some(reason) = reason.filter(|r| STUCK.contains(r)) {
        let message = waiting["message"].as_str().unwrap_or_default();
        return Some(words(name, reason, message));
    }
    let last = &container["lastState"]["terminated"];
    let looping = reason == Some("CrashLoopBackOff")
        || (container["ready"] != true && last.is_object() && reason.is_none());
    if !looping || count(&container["restartCount"], 0) <= CRASH_LOOP_RESTARTS {
        return None;
    }
    let ended = match last.is_object() {
        true => format!(
            "; last ended {} (exit code {}){}",
            last["reason"].as_str().unwrap_or("terminated"),
            count(&last["exitCode"], 0),
            last["message"]
                .as_str()
                .map(|m| format!(": {}", m.trim()))
                .unwrap_or_default()
        ),
        false => String::new(),
    };
    Some(format!(
        "container {name}: CrashLoopBackOff, restarted more than {CRASH_LOOP_RESTARTS} times{ended}"
    ))
}

/// What a container not yet ready waits for, when it says.
fn container_waiting(container: &Value) -> Option<String> {
    let name = container["name"].as_str().unwrap_or_default();
    let waiting = &container["state"]["waiting"];
    let reason = waiting["reason"].as_str()?;
    Some(words(
        name,
        reason,
        waiting["message"].as_str().unwrap_or_default(),
    ))
}

/// `container NAME: Reason: message`, as the kubelet put it.
fn words(name: &str, reason: &str, message: &str) -> String {
    match message.is_empty() {
        true => format!("container {name}: {reason}"),
        false => format!("container {name}: {reason}: {}", message.trim()),
    }
}
