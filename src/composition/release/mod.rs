//! One target's release, a small state machine between a composition and Helm. What to do is
//! chosen from what is known before any Helm call (`plan`, pure and tested state by state):
//!
//! 1. its own? a namespace of its own was made for it, and the release, if there is one, is
//!    the composition's (`confinement`): otherwise nothing is written;
//! 2. up to date? the fingerprint of these inputs is the one recorded, Helm's latest record is
//!    that revision, deployed, and the release's objects are there: nothing to do, no `helm`;
//! 3. failed for good before? the same inputs that the cluster refused, or that do not
//!    render, run no Helm again (`attempt`);
//! 4. recover a release a crash left pending;
//! 5. `helm upgrade --install` as the release identity, whose rendered manifest is admitted
//!    before Helm writes any of it (`admission`): it stays in the composition's namespaces,
//!    binds roles only to their ServiceAccounts, grants no more through ClusterRoles than the
//!    chart does with its defaults, and every object is put to the authorizer (`access`); then
//!    the target's new entry in `status.clusters`, or its failure, final or not (`plan`).
//!
//! Helm installs a chart's `crds/` before it renders, so those are not admitted; the operator
//! grants them by name, and a refusal of one is reported as missing permissions before any
//! release exists.

mod admission;
mod plan;

use std::pin::pin;
use std::time::Duration;

use kube::ResourceExt;

use super::attempt::{Attempt, remove_failed_install};
use super::confinement::{self, kube_context};
use super::inputs::TargetRelease;
use super::placement::Target;
use super::status::{StatusWriter, publish};
use super::{Context, Error, HelmStep, cleanup, drift, fingerprint};
use crate::api::{ClusterStatus, Phase, ResourceRef};
use crate::helm;
use crate::runtime::events::EventType;
use plan::{AfterFailure, Known, Next};

/// How a target's release ended, when nothing failed.
pub(super) enum Outcome {
    /// The recorded install is what these inputs would install: no Helm call; what drifted
    /// was settled.
    UpToDate(Box<drift::Settled>),
    /// Installed or upgraded: the target's new entry.
    Released(Box<ClusterStatus>),
}

/// A target's release failed: why, and the target's entry to record when Helm got to write.
pub(super) struct Failure {
    /// The first problem.
    pub error: Error,
    /// The entry saying the target failed, with what is still installed there.
    pub entry: Option<ClusterStatus>,
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Failure { error, entry: None }
    }
}

/// The status writer the releases of one composition share while they run side by side.
pub(super) type SharedWriter<'w, 'a> = futures::lock::Mutex<&'w mut StatusWriter<'a>>;

impl TargetRelease<'_> {
    /// Brings the target's release to these inputs, unless it is there already. The status
    /// says when a Helm write takes a while; the caller records the outcome.
    pub(super) async fn reconcile(
        &self,
        writer: &SharedWriter<'_, '_>,
    ) -> Result<Outcome, Failure> {
        let fingerprint = fingerprint(
            &self.chart.digest,
            self.fingerprinted,
            &self.target.cluster,
            &self.target.namespace,
            &self.context.helm_version,
        );
        let attempt = Attempt::new(fingerprint, self.object);
        let (recorded, resources) = {
            let writer = writer.lock().await;
            let recorded = writer.recorded(&self.target.cluster).cloned();
            (recorded, writer.resources().to_vec())
        };
        let uid = self.object.uid().unwrap_or_default();
        if self.target.own_namespace {
            confinement::check_own_namespace(self.reach, self.target, &uid).await?;
        }
        // Helm's own records, read without a `helm` process.
        let live = self.reach.release_record(self.target).await?;
        let known = Known {
            target: self.target,
            uid: &uid,
            recorded: recorded.as_ref(),
            live: live.as_ref(),
            attempt: &attempt,
        };
        let (step, kube_context) = match plan::next(&known) {
            Next::Refuse(error) => return Err(error.into()),
            Next::Unchanged(revision) => {
                let settled = self.settle_drift(revision, &resources).await?;
                return Ok(Outcome::UpToDate(Box::new(settled)));
            }
            Next::FailedBefore(error) => {
                let entry = recorded;
                return Err(Failure { error, entry });
            }
            Next::Write(step) => (step, self.kube_context()?),
            Next::Recover(state) => {
                let kube_context = self.kube_context()?;
                (self.recover(&kube_context, &state).await?, kube_context)
            }
        };
        let upgrade = self.gated_upgrade(&kube_context, writer);
        let note = format!("{step} {}", self.target.release);
        let (outcome, admitted) = announced(upgrade, writer, &note).await;
        if let Some(Err(refused)) = admitted {
            return Err(refused.into());
        }
        self.released(step, outcome, recorded, attempt, &kube_context)
            .await
    }

    /// What drifted of the release since it was applied: the objects the drift watches
    /// suspect, and any that are gone; settled as the definition says, with an event.
    async fn settle_drift(
        &self,
        revision: u64,
        resources: &[ResourceRef],
    ) -> Result<drift::Settled, Error> {
        let composition = (
            self.object.namespace().unwrap_or_default(),
            self.object.name_any(),
        );
        let cluster = &self.target.cluster;
        let mut suspects = self.context.drift.take(&composition, cluster);
        let namespace = &self.target.namespace;
        suspects.extend(drift::missing(self.reach, resources, namespace).await?);
        let settled = drift::settle(self, revision, suspects, &self.definition.drift).await?;
        let (context, object) = (self.context, self.object);
        if !settled.corrected.is_empty() {
            let note = settled.corrected.iter().map(ToString::to_string);
            let note = format!("restored: {}", note.collect::<Vec<_>>().join("; "));
            publish(context, object, EventType::Normal, "DriftCorrected", &note).await;
        }
        Ok(settled)
    }

    /// How Helm reaches the target's namespace, as the release identity.
    fn kube_context(&self) -> Result<helm::KubeContext, Error> {
        kube_context(self.context, self.reach, &self.target.namespace)
    }

    /// Recovers a release a crash left in `state`, with an event: the Helm write to make next,
    /// an upgrade when the release is still there, else an install.
    async fn recover(
        &self,
        kube_context: &helm::KubeContext,
        state: &helm::ReleaseStatus,
    ) -> Result<HelmStep, Error> {
        let release = &self.target.release;
        let still_there = recover(self.context, kube_context, release)
            .await
            .map_err(|error| Error::from_helm(HelmStep::Recover, error, self.withhold))?;
        let note = format!("release {release} was stuck in {state}; recovered");
        let (context, object) = (self.context, self.object);
        publish(context, object, EventType::Warning, "Recovered", &note).await;
        Ok(match still_there {
            true => HelmStep::Upgrade,
            false => HelmStep::Install,
        })
    }

    /// The target's entry after the Helm write. A release installed under a new name replaces
    /// the one recorded; a failure keeps the revision and fingerprint of what is still there.
    async fn released(
        &self,
        step: HelmStep,
        outcome: Result<helm::Release, helm::Error>,
        recorded: Option<ClusterStatus>,
        attempt: Attempt,
        kube_context: &helm::KubeContext,
    ) -> Result<Outcome, Failure> {
        let release = match outcome {
            Ok(release) => release,
            // The operator's grant of the namespace came after the record read above, or went
            // for a moment: nothing was written, so it is the same wait as there.
            Err(error) if error.is_records_forbidden() && self.reach.is_local() => {
                return Err(Error::AccessPending(self.target.namespace.clone()).into());
            }
            Err(error) => {
                let error = Error::from_helm(step, error, self.withhold);
                return Err(self
                    .failed(step, error, recorded, attempt, kube_context)
                    .await);
            }
        };
        let fingerprint = attempt.fingerprint;
        if let Some(previous) = recorded.filter(|c| c.release != self.target.release) {
            let (context, reach, object) = (self.context, self.reach, self.object);
            cleanup::replaced(context, reach, object, &previous, &self.target.release).await?;
        }
        let revision = i64::try_from(release.revision).ok();
        let entry = self.entry(Phase::Ready, revision, Some(fingerprint), String::new());
        let reason = match step {
            HelmStep::Install => "Installed",
            _ => "Upgraded",
        };
        let note = format!(
            "release {} revision {}",
            self.target.release, release.revision
        );
        publish(self.context, self.object, EventType::Normal, reason, &note).await;
        Ok(Outcome::Released(Box::new(entry)))
    }

    /// The failure of a Helm write. One the same inputs would meet again is recorded as such,
    /// so they are not tried again; a first install that failed so is removed, so that nothing
    /// of it stays half-installed.
    async fn failed(
        &self,
        step: HelmStep,
        mut error: Error,
        recorded: Option<ClusterStatus>,
        attempt: Attempt,
        kube_context: &helm::KubeContext,
    ) -> Failure {
        let (mut revision, mut fingerprint) = recorded
            .map(|c| (c.revision, c.fingerprint))
            .unwrap_or_default();
        let failed_install = self.definition.failed_install;
        let after = plan::after_failure(step, &error, self.withhold, failed_install);
        let note = match after {
            AfterFailure::Retry | AfterFailure::Final => None,
            AfterFailure::FinalKept => Some(KEPT_NOTE.to_string()),
            AfterFailure::FinalRemoved => {
                let release = &self.target.release;
                let (context, withhold) = (self.context, self.withhold);
                let (removed, note) =
                    remove_failed_install(context, kube_context, release, withhold).await;
                if removed {
                    (revision, fingerprint) = (None, None);
                }
                note
            }
        };
        if let (Error::Rejected(_, message), Some(note)) = (&mut error, note) {
            message.push_str(&note);
        }
        let message = crate::runtime::error_message(&error);
        let mut entry = self.entry(Phase::Failed, revision, fingerprint, message);
        entry.final_failure = (after != AfterFailure::Retry).then(|| attempt.final_failure(&error));
        Failure {
            error,
            entry: Some(entry),
        }
    }

    /// The target's entry in `status.clusters`.
    fn entry(
        &self,
        phase: Phase,
        revision: Option<i64>,
        fingerprint: Option<String>,
        message: String,
    ) -> ClusterStatus {
        let Target {
            cluster,
            namespace,
            release,
            ..
        } = self.target;
        ClusterStatus {
            revision,
            chart_version: Some(self.chart.version.clone()),
            fingerprint,
            message,
            ..ClusterStatus::new(cluster, namespace, release, phase)
        }
    }
}

/// Added to a refused first install's message when the definition keeps it.
const KEPT_NOTE: &str =
    "; what the install had created is kept to look into (spec.failedInstall: Keep)";

/// How long a Helm write runs before the status says it is under way. Most take less, and then
/// their result is the only status write.
const ANNOUNCE_AFTER: Duration = Duration::from_secs(2);

/// `upgrade`, with the status saying it is under way (`note`) once it has run for
/// [`ANNOUNCE_AFTER`]: a Helm write may take minutes. A failed status write does not stop Helm
/// halfway; the result's write will say how it went.
async fn announced<T>(
    upgrade: impl Future<Output = T>,
    writer: &SharedWriter<'_, '_>,
    note: &str,
) -> T {
    let mut upgrade = pin!(upgrade);
    if let Ok(done) = tokio::time::timeout(ANNOUNCE_AFTER, &mut upgrade).await {
        return done;
    }
    if let Err(error) = writer.lock().await.progressing(note).await {
        tracing::warn!(error = %crate::runtime::error_message(&error), "cannot say that {note} is under way");
    }
    upgrade.await
}

/// A release stuck pending (a crash mid-operation) goes back to its last deployed revision, or
/// away when it never deployed. Whether the release is still there.
async fn recover(
    context: &Context,
    target: &helm::KubeContext,
    release: &str,
) -> Result<bool, helm::Error> {
    let history = context.helm.history(target, release).await?;
    let deployed = history.iter().rev().find(|r| {
        matches!(
            r.status,
            helm::ReleaseStatus::Deployed | helm::ReleaseStatus::Superseded
        )
    });
    match deployed {
        Some(revision) => {
            context
                .helm
                .rollback(target, release, revision.revision)
                .await?;
            Ok(true)
        }
        None => {
            context.helm.uninstall(target, release).await?;
            Ok(false)
        }
    }
}
