//! Reasons, retries and backoff of the controller's errors.

use super::*;

#[test]
fn a_composition_that_keeps_failing_is_retried_less_and_less_often() {
    let failed = Error::Kube(
        "read composition",
        kube::Error::LinesCodecMaxLineLengthExceeded,
    );
    let waits: Vec<u64> = (1..=8).map(|n| failed.backoff(n).as_secs()).collect();
    assert_eq!(waits, [10, 20, 40, 80, 160, 300, 300, 300]);
    assert_eq!(failed.backoff(u32::MAX), MAX_RETRY);
    let pending = Error::AccessPending("team-a".into());
    let waits: Vec<u128> = (1..=8).map(|n| pending.backoff(n).as_millis()).collect();
    assert_eq!(waits, [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000]);
}

#[test]
fn refusals_by_the_cluster_are_final_and_missing_permissions_are_not() {
    let refused = Error::Rejected(HelmStep::Install, "denied request: no".into());
    assert!(refused.is_final() && refused.is_terminal());
    assert_eq!(refused.reason(), "InstallRejected");
    let again = |reason: &str| Error::FailedBefore {
        reason: reason.into(),
        message: "refused".into(),
    };
    assert_eq!(again("InstallRejected").reason(), "InstallRejected");
    assert_eq!(again("Nonsense").reason(), "FailedBefore");
    assert!(!Error::PermissionsMissing("batch/v1/Job".into()).is_final());
    assert!(!Error::AccessPending("team".into()).is_final());
}

#[test]
fn a_render_failure_says_helms_words_once() {
    let error = Error::Render(helm::Error::Failed {
        verb: "upgrade",
        message: "execution error at (c/templates/a.yaml:1:3): no".into(),
    });
    let message = crate::runtime::error_message(&error);
    assert_eq!(message.matches("a.yaml:1:3").count(), 1, "{message}");
    assert!(
        message.starts_with("the chart does not render: "),
        "{message}"
    );
}

#[test]
fn every_final_failure_keeps_its_reason_when_met_again() {
    let rendering = helm::Error::Failed {
        verb: "upgrade",
        message: "execution error at (c/templates/a.yaml:1:3): no".into(),
    };
    let finals = [
        Error::Render(rendering),
        Error::TooLarge("16 MiB".into()),
        Error::Rejected(HelmStep::Install, "denied".into()),
        Error::Rejected(HelmStep::Upgrade, "denied".into()),
    ];
    for error in finals {
        assert!(error.is_final());
        let again = Error::FailedBefore {
            reason: error.reason().into(),
            message: error.to_string(),
        };
        assert_eq!(again.reason(), error.reason(), "{error}");
    }
}

#[test]
fn a_success_starts_the_count_again() {
    let failures = Failures::default();
    assert_eq!(failures.failed("a"), 1);
    assert_eq!(failures.failed("a"), 2);
    assert_eq!(failures.failed("b"), 1);
    failures.succeeded("a");
    assert_eq!(failures.failed("a"), 1);
}

#[test]
fn missing_permissions_are_looked_at_again_sooner_than_other_terminal_errors() {
    let missing = Error::PermissionsMissing("batch/v1/Job".into());
    assert!(missing.is_terminal());
    assert!(
        missing.retry_after() < Error::ReleaseName("-".into()).retry_after(),
        "a binding may still be on its way"
    );
}
