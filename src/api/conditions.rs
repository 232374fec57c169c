//! Setting `metav1.Condition`s the way Kubernetes expects: one per type, and a transition time
//! that moves only when the status does.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// The condition every compositor object has: whether it is what its spec asks for.
pub const READY: &str = "Ready";
/// A composition's: only a change of the composition can help.
pub const STALLED: &str = "Stalled";
/// A composition's: a Helm write is under way, or a retry is due.
pub const RECONCILING: &str = "Reconciling";
/// A composition's: its release was installed.
pub const INSTALLED: &str = "Installed";
/// A composition's with `spec.dependsOn`: every composition it waits for is Ready.
pub const DEPENDENCIES_READY: &str = "DependenciesReady";
/// A definition's: its chart was found and downloaded.
pub const CHART_RESOLVED: &str = "ChartResolved";
/// A definition's: its CRD is applied and serves the chart's version.
pub const CRD_READY: &str = "CRDReady";
/// A definition's: its controllers are deployed with their permissions.
pub const CONTROLLER_READY: &str = "ControllerReady";

/// Longest condition message kept (the apiserver allows 32 KiB; events and humans want less).
const MESSAGE_LIMIT: usize = 2048;

/// `text` cut to at most `limit` bytes on a character boundary, with `…` when cut.
pub fn shorten(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_string();
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Sets condition `type_` in `conditions`, keeping `lastTransitionTime` when the status does
/// not change.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
) {
    let status = if status { "True" } else { "False" }.to_string();
    let message = shorten(message, MESSAGE_LIMIT);
    let transitioned = |existing: &Condition| existing.status != status;
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => {
            if transitioned(existing) {
                existing.last_transition_time = Time(Timestamp::now());
            }
            existing.status = status;
            existing.reason = reason.to_string();
            existing.message = message;
            existing.observed_generation = observed_generation;
        }
        None => conditions.push(Condition {
            type_: type_.to_string(),
            status,
            reason: reason.to_string(),
            message,
            observed_generation,
            last_transition_time: Time(Timestamp::now()),
        }),
    }
}

/// Removes condition `type_`: kstatus' abnormal-true conditions (Reconciling, Stalled) are
/// absent rather than False when they do not apply.
pub fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) {
    conditions.retain(|c| c.type_ != type_);
}

/// The condition of type `type_`, if set.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_is_cut_on_a_character_boundary() {
        assert_eq!(shorten("short", 10), "short");
        let cut = shorten(&"é".repeat(10), 5);
        assert_eq!(cut, "éé…");
    }

    #[test]
    fn transition_time_moves_only_with_the_status() {
        let mut conditions = Vec::new();
        set_condition(
            &mut conditions,
            "Ready",
            false,
            "Progressing",
            "working",
            Some(1),
        );
        let first = conditions[0].last_transition_time.clone();
        set_condition(
            &mut conditions,
            "Ready",
            false,
            "StillProgressing",
            "still",
            Some(2),
        );
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].last_transition_time, first);
        assert_eq!(
            (
                conditions[0].reason.as_str(),
                conditions[0].observed_generation
            ),
            ("StillProgressing", Some(2))
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
        set_condition(&mut conditions, "Ready", true, "Ready", "", Some(2));
        assert_ne!(conditions[0].last_transition_time, first);
        assert_eq!(
            find_condition(&conditions, "Ready").map(|c| c.status.as_str()),
            Some("True")
        );
    }

    #[test]
    fn long_messages_are_cut() {
        let mut conditions = Vec::new();
        set_condition(
            &mut conditions,
            "Ready",
            false,
            "Failed",
            &"x".repeat(10_000),
            None,
        );
        assert!(conditions[0].message.len() < 2100);
    }
}
