//! The release state machine's choices, from what is known without running Helm: before the
//! write, what to do (refuse, nothing, the failure again, recover, install or upgrade); after a
//! failed write, whether the failure is final and what becomes of a first install's remains.
//! Pure, so that every state has a test.

use crate::api::{ClusterStatus, FailedInstall};
use crate::composition::attempt::Attempt;
use crate::composition::confinement::{Owner, owner_of, release_place};
use crate::composition::placement::Target;
use crate::composition::{Error, HelmStep};
use crate::helm::{Record, ReleaseStatus};

/// What is known of a target's release before any Helm call.
pub(super) struct Known<'a> {
    /// Where the release goes.
    pub target: &'a Target,
    /// The composition's uid.
    pub uid: &'a str,
    /// The composition's status entry for the target.
    pub recorded: Option<&'a ClusterStatus>,
    /// Helm's latest record of the release.
    pub live: Option<&'a Record>,
    /// The inputs of this write.
    pub attempt: &'a Attempt,
}

/// What the release needs.
#[derive(Debug)]
pub(super) enum Next {
    /// Another composition's release, or one made without compositor: nothing is written.
    Refuse(Error),
    /// What is deployed, at this revision, is what these inputs install: no Helm; drift is
    /// settled.
    Unchanged(u64),
    /// These inputs failed for good before: the same failure again, and no Helm.
    FailedBefore(Error),
    /// A crash left the release mid-operation, in this state: recover it, then write.
    Recover(ReleaseStatus),
    /// A Helm write: an install, or an upgrade of the release there is.
    Write(HelmStep),
}

/// The state machine's choice before the Helm write, in order: whose the release is, whether
/// it is up to date, whether these inputs failed for good, whether a crash left it pending.
pub(super) fn next(known: &Known) -> Next {
    if owner_of(known.live, known.recorded, known.uid, known.target) == Owner::Another {
        return Next::Refuse(Error::ReleaseOwnedByAnother(release_place(known.target)));
    }
    if let Some(revision) = unchanged(known) {
        return Next::Unchanged(revision);
    }
    if let Some(error) = known.recorded.and_then(|r| known.attempt.failed_before(r)) {
        return Next::FailedBefore(error);
    }
    match known.live {
        None => Next::Write(HelmStep::Install),
        Some(live) if live.status.is_pending() => Next::Recover(live.status.clone()),
        Some(_) => Next::Write(HelmStep::Upgrade),
    }
}

/// The deployed revision, when the same inputs rendered, passed the checks and were installed
/// under the same name before, and that revision is still the deployed one.
fn unchanged(known: &Known) -> Option<u64> {
    let recorded = known.recorded?;
    let live = known.live.filter(|live| {
        live.status == ReleaseStatus::Deployed
            && i64::try_from(live.revision).ok() == recorded.revision
    })?;
    let same = recorded.fingerprint.as_deref() == Some(known.attempt.fingerprint.as_str())
        && recorded.release == known.target.release;
    same.then_some(live.revision)
}

/// What follows a failed Helm write.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum AfterFailure {
    /// Not final: tried again with back-off.
    Retry,
    /// Final: the same inputs are not tried again; the release stays at its last revision.
    Final,
    /// Final, of a first install kept to look into (`spec.failedInstall: Keep`).
    FinalKept,
    /// Final, of a first install whose remains are removed.
    FinalRemoved,
}

/// Whether `error` of `step` is final and, for a first install, what becomes of what it
/// created. A render that may read the cluster (`lookup`, so `withhold`) may succeed once what
/// it reads is there, so its failure is not final.
pub(super) fn after_failure(
    step: HelmStep,
    error: &Error,
    withhold: bool,
    failed_install: FailedInstall,
) -> AfterFailure {
    let reads_cluster = withhold && matches!(error, Error::Render(_));
    if !error.is_final() || reads_cluster {
        return AfterFailure::Retry;
    }
    match (step, failed_install) {
        (HelmStep::Install, FailedInstall::Keep) => AfterFailure::FinalKept,
        (HelmStep::Install, FailedInstall::Uninstall) => AfterFailure::FinalRemoved,
        _ => AfterFailure::Final,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use kube::core::DynamicObject;
    use serde_json::json;

    use super::*;
    use crate::api::{FinalFailure, Phase, RELEASE_OWNER_LABEL};
    use crate::helm;

    const UID: &str = "uid-of-app";
    const FINGERPRINT: &str = "fp-1";

    fn target() -> Target {
        Target {
            cluster: "local".into(),
            namespace: "team-a".into(),
            release: "app".into(),
            own_namespace: false,
        }
    }

    fn composition(retry: Option<&str>) -> DynamicObject {
        let annotations = retry.map(|r| json!({"compositor.dev/retry": r}));
        serde_json::from_value(json!({
            "apiVersion": "apps.example.org/v1", "kind": "App",
            "metadata": {"name": "app", "namespace": "team-a", "uid": UID,
                         "annotations": annotations.unwrap_or(json!({}))},
        }))
        .unwrap()
    }

    fn attempt(fingerprint: &str, retry: Option<&str>) -> Attempt {
        Attempt::new(fingerprint.into(), &composition(retry))
    }

    fn live(revision: u64, status: ReleaseStatus, owner: Option<&str>) -> Record {
        let labels = owner.map(|o| (RELEASE_OWNER_LABEL.to_string(), o.to_string()));
        Record {
            revision,
            status,
            labels: labels.into_iter().collect::<BTreeMap<_, _>>(),
        }
    }

    fn recorded(revision: Option<i64>, fingerprint: &str, phase: Phase) -> ClusterStatus {
        let target = target();
        ClusterStatus {
            revision,
            chart_version: Some("1.0.0".into()),
            fingerprint: Some(fingerprint.into()),
            ..ClusterStatus::new(&target.cluster, &target.namespace, &target.release, phase)
        }
    }

    fn next_of(recorded: Option<&ClusterStatus>, live: Option<&Record>, attempt: &Attempt) -> Next {
        let target = target();
        next(&Known {
            target: &target,
            uid: UID,
            recorded,
            live,
            attempt,
        })
    }

    #[test]
    fn no_release_is_installed() {
        let next = next_of(None, None, &attempt(FINGERPRINT, None));
        assert!(matches!(next, Next::Write(HelmStep::Install)), "{next:?}");
    }

    #[test]
    fn the_same_inputs_deployed_are_left_alone() {
        let entry = recorded(Some(3), FINGERPRINT, Phase::Ready);
        let live = live(3, ReleaseStatus::Deployed, Some(UID));
        let next = next_of(Some(&entry), Some(&live), &attempt(FINGERPRINT, None));
        assert!(matches!(next, Next::Unchanged(3)), "{next:?}");
    }

    #[test]
    fn new_inputs_upgrade() {
        let entry = recorded(Some(3), FINGERPRINT, Phase::Ready);
        let live = live(3, ReleaseStatus::Deployed, Some(UID));
        let next = next_of(Some(&entry), Some(&live), &attempt("fp-2", None));
        assert!(matches!(next, Next::Write(HelmStep::Upgrade)), "{next:?}");
    }

    #[test]
    fn a_revision_other_than_the_recorded_one_is_upgraded_back() {
        // `helm rollback` by hand: the same inputs, but not what is deployed.
        let entry = recorded(Some(3), FINGERPRINT, Phase::Ready);
        let live = live(4, ReleaseStatus::Deployed, Some(UID));
        let next = next_of(Some(&entry), Some(&live), &attempt(FINGERPRINT, None));
        assert!(matches!(next, Next::Write(HelmStep::Upgrade)), "{next:?}");
    }

    #[test]
    fn a_failed_revision_of_the_same_inputs_is_written_again_unless_final() {
        let entry = recorded(Some(3), FINGERPRINT, Phase::Failed);
        let live = live(3, ReleaseStatus::Failed, Some(UID));
        let next = next_of(Some(&entry), Some(&live), &attempt(FINGERPRINT, None));
        assert!(matches!(next, Next::Write(HelmStep::Upgrade)), "{next:?}");
    }

    #[test]
    fn a_release_renamed_is_installed_under_its_new_name() {
        let mut entry = recorded(Some(3), FINGERPRINT, Phase::Ready);
        entry.release = "old-name".into();
        let next = next_of(Some(&entry), None, &attempt(FINGERPRINT, None));
        assert!(matches!(next, Next::Write(HelmStep::Install)), "{next:?}");
    }

    #[test]
    fn inputs_that_failed_for_good_are_not_tried_again() {
        let failing = attempt(FINGERPRINT, None);
        let mut entry = recorded(Some(2), "fp-0", Phase::Failed);
        entry.message = "refused by a webhook".into();
        entry.final_failure = Some(failing.final_failure(&rejected()));
        let live = live(2, ReleaseStatus::Deployed, Some(UID));
        let next = next_of(Some(&entry), Some(&live), &attempt(FINGERPRINT, None));
        let Next::FailedBefore(Error::FailedBefore { reason, message }) = next else {
            panic!("{next:?}");
        };
        assert_eq!(reason, "UpgradeRejected");
        assert_eq!(message, "refused by a webhook");
    }

    #[test]
    fn a_new_retry_annotation_tries_failed_inputs_again() {
        let mut entry = recorded(Some(2), "fp-0", Phase::Failed);
        entry.final_failure = Some(attempt(FINGERPRINT, None).final_failure(&rejected()));
        let live = live(2, ReleaseStatus::Deployed, Some(UID));
        let next = next_of(Some(&entry), Some(&live), &attempt(FINGERPRINT, Some("1")));
        assert!(matches!(next, Next::Write(HelmStep::Upgrade)), "{next:?}");
    }

    #[test]
    fn a_final_failure_of_other_inputs_does_not_stop_these() {
        let mut entry = recorded(Some(2), "fp-0", Phase::Failed);
        entry.final_failure = Some(FinalFailure {
            inputs: "fp-0".into(),
            reason: "UpgradeFailed".into(),
        });
        let live = live(2, ReleaseStatus::Deployed, Some(UID));
        let next = next_of(Some(&entry), Some(&live), &attempt(FINGERPRINT, None));
        assert!(matches!(next, Next::Write(HelmStep::Upgrade)), "{next:?}");
    }

    #[test]
    fn a_pending_release_is_recovered_first() {
        let entry = recorded(Some(2), "fp-0", Phase::Progressing);
        for status in [
            ReleaseStatus::PendingInstall,
            ReleaseStatus::PendingUpgrade,
            ReleaseStatus::PendingRollback,
        ] {
            let live = live(3, status.clone(), Some(UID));
            let next = next_of(Some(&entry), Some(&live), &attempt(FINGERPRINT, None));
            assert!(
                matches!(&next, Next::Recover(s) if *s == status),
                "{status:?}: {next:?}"
            );
        }
    }

    #[test]
    fn another_compositions_release_is_refused() {
        let live = live(1, ReleaseStatus::Deployed, Some("uid-of-another"));
        let next = next_of(None, Some(&live), &attempt(FINGERPRINT, None));
        let Next::Refuse(Error::ReleaseOwnedByAnother(place)) = next else {
            panic!("{next:?}");
        };
        assert_eq!(place, "release app in namespace team-a on cluster local");
    }

    #[test]
    fn an_administrators_release_is_refused_even_with_the_same_fingerprint() {
        // No owner label, and the composition's status does not record it.
        let live = live(1, ReleaseStatus::Deployed, None);
        let next = next_of(None, Some(&live), &attempt(FINGERPRINT, None));
        assert!(matches!(next, Next::Refuse(_)), "{next:?}");
        // A status naming the release without a revision is no proof of having made it.
        let entry = recorded(None, FINGERPRINT, Phase::Failed);
        let next = next_of(Some(&entry), Some(&live), &attempt(FINGERPRINT, None));
        assert!(matches!(next, Next::Refuse(_)), "{next:?}");
    }

    #[test]
    fn an_unlabelled_release_the_status_records_is_the_compositions() {
        // Made before releases carried the owner label.
        let entry = recorded(Some(1), FINGERPRINT, Phase::Ready);
        let live = live(1, ReleaseStatus::Deployed, None);
        let next = next_of(Some(&entry), Some(&live), &attempt(FINGERPRINT, None));
        assert!(matches!(next, Next::Unchanged(1)), "{next:?}");
        let next = next_of(Some(&entry), Some(&live), &attempt("fp-2", None));
        assert!(matches!(next, Next::Write(HelmStep::Upgrade)), "{next:?}");
    }

    fn rejected() -> Error {
        Error::Rejected(HelmStep::Upgrade, "refused by a webhook".into())
    }

    fn render_failure() -> Error {
        Error::Render(helm::Error::Failed {
            verb: "upgrade",
            message: "template: app/templates/a.yaml: nil pointer".into(),
        })
    }

    #[test]
    fn what_the_cluster_refuses_is_final() {
        let after = after_failure(HelmStep::Upgrade, &rejected(), false, Default::default());
        assert_eq!(after, AfterFailure::Final);
        let too_large = Error::TooLarge("the release is larger than 1 MiB".into());
        let after = after_failure(HelmStep::Upgrade, &too_large, true, Default::default());
        assert_eq!(after, AfterFailure::Final);
    }

    #[test]
    fn a_first_install_refused_is_removed_or_kept_as_the_definition_says() {
        let error = rejected();
        let removed = after_failure(HelmStep::Install, &error, false, FailedInstall::Uninstall);
        assert_eq!(removed, AfterFailure::FinalRemoved);
        let kept = after_failure(HelmStep::Install, &error, false, FailedInstall::Keep);
        assert_eq!(kept, AfterFailure::FinalKept);
    }

    #[test]
    fn a_render_failure_is_final_unless_the_render_reads_the_cluster() {
        let error = render_failure();
        let after = after_failure(HelmStep::Upgrade, &error, false, Default::default());
        assert_eq!(after, AfterFailure::Final);
        let after = after_failure(HelmStep::Install, &error, true, Default::default());
        assert_eq!(after, AfterFailure::Retry);
    }

    #[test]
    fn what_may_pass_later_is_tried_again() {
        let timeout = helm::Error::Timeout {
            verb: "upgrade",
            timeout: Duration::from_secs(300),
        };
        for error in [
            Error::Helm(HelmStep::Install, timeout),
            Error::PermissionsMissing("create deployments".into()),
            Error::AccessPending("team-a".into()),
        ] {
            let after = after_failure(HelmStep::Install, &error, false, Default::default());
            assert_eq!(after, AfterFailure::Retry, "{error}");
        }
    }
}
