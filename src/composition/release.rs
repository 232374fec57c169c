//! One target's release, a small state machine between a composition and Helm:
//!
//! 1. its own? a namespace of its own was made for it, and the release, if there is one, is
//!    the composition's (`confinement`): otherwise nothing is written;
//! 2. up to date? the fingerprint of these inputs is the one recorded, Helm's latest record is
//!    that revision, deployed, and the release's objects are there: nothing to do, no `helm`;
//! 3. failed for good before? the same inputs that the cluster refused, or that do not
//!    render, run no Helm again (`attempt`);
//! 4. recover a release a crash left pending;
//! 5. `helm upgrade --install` as the release identity, whose rendered manifest is admitted
//!    before Helm writes any of it: it stays in the composition's namespaces, binds roles only
//!    to their ServiceAccounts, grants no more through ClusterRoles than the chart does with
//!    its defaults, and every object is put to the authorizer (`access`), all from Helm's
//!    post-renderer (the engine's gate); then the target's new entry in `status.clusters`.
//!
//! Helm installs a chart's `crds/` before it renders, so those are not admitted; the operator
//! grants them by name, and a refusal of one is reported as missing permissions before any
//! release exists.

use std::pin::pin;
use std::time::Duration;

use futures::future::{self, Either};
use kube::ResourceExt;
use kube::api::Api;
use kube::core::DynamicObject;

use super::attempt::{Attempt, remove_failed_install};
use super::confinement::{self, Owner, kube_context, owner_of, release_place};
use super::inputs::TargetRelease;
use super::reach::Reach;
use super::status::{StatusWriter, publish};
use super::{Context, Error, HelmStep, access, cleanup, drift, fingerprint};
use crate::api::{
    ClusterStatus, CompositionChart, FailedInstall, NAMESPACE_OWNER_ANNOTATION, Phase,
    RELEASE_OWNER_LABEL, ResourceRef,
};
use crate::helm::{self, RenderedDocument, parse_documents};
use crate::runtime::events::EventType;

use helm::Record;

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
            self.values,
            &self.target.cluster,
            &self.target.namespace,
            &self.context.helm_version,
        );
        let (recorded, resources) = {
            let writer = writer.lock().await;
            let recorded = writer.recorded(&self.target.cluster).cloned();
            (recorded, writer.resources().to_vec())
        };
        if self.target.own_namespace {
            let uid = self.object.uid().unwrap_or_default();
            confinement::check_own_namespace(self.reach, self.target, &uid).await?;
        }
        // Helm's own records, read without a `helm` process.
        let live = self.reach.release_record(self.target).await?;
        self.check_owner(live.as_ref(), recorded.as_ref())?;
        if let Some(revision) = self.unchanged(recorded.as_ref(), live.as_ref(), &fingerprint) {
            let settled = self.settle_drift(revision, &resources).await?;
            return Ok(Outcome::UpToDate(Box::new(settled)));
        }
        let attempt = Attempt::new(fingerprint, self.object);
        if let Some(error) = recorded.as_ref().and_then(|r| attempt.failed_before(r)) {
            return Err(Failure {
                error,
                entry: recorded,
            });
        }
        let kube_context = kube_context(self.context, self.reach, &self.target.namespace)?;
        let step = self
            .recover_if_pending(&kube_context, live.as_ref())
            .await?;
        let upgrade = self.gated_upgrade(&kube_context, writer);
        let note = format!("{step} {}", self.target.release);
        let (outcome, admitted) = announced(upgrade, writer, &note).await;
        if let Some(Err(refused)) = admitted {
            return Err(refused.into());
        }
        self.released(step, outcome, recorded, attempt, &kube_context)
            .await
    }

    /// Refuses a release that another composition made, or that compositor did not make (an
    /// administrator's, installed with `helm`): nothing is written to it. A release without the
    /// owner label is this composition's only when its own status records it, as a release made
    /// before releases carried the label.
    fn check_owner(
        &self,
        live: Option<&Record>,
        recorded: Option<&ClusterStatus>,
    ) -> Result<(), Error> {
        let uid = self.object.uid().unwrap_or_default();
        match owner_of(live, recorded, &uid, self.target) {
            Owner::Nobody | Owner::This => Ok(()),
            Owner::Another => Err(Error::ReleaseOwnedByAnother(release_place(self.target))),
        }
    }

    /// The deployed revision, when the same inputs rendered, passed the RBAC check and were
    /// installed before, and that revision is still the deployed one.
    fn unchanged(
        &self,
        recorded: Option<&ClusterStatus>,
        live: Option<&Record>,
        fingerprint: &str,
    ) -> Option<u64> {
        let recorded = recorded?;
        let live = live.filter(|live| {
            live.status == helm::ReleaseStatus::Deployed
                && i64::try_from(live.revision).ok() == recorded.revision
        })?;
        let same = recorded.fingerprint.as_deref() == Some(fingerprint)
            && recorded.release == self.target.release;
        same.then_some(live.revision)
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

    /// `helm upgrade --install` with the gate as its post-renderer, so that what Helm renders is
    /// admitted ([`TargetRelease::admit`]) before Helm writes any of it: one Helm process, and the
    /// check is of exactly what Helm writes. The admission is `None` when Helm stopped before it
    /// had rendered anything.
    async fn gated_upgrade(
        &self,
        kube_context: &helm::KubeContext,
        writer: &SharedWriter<'_, '_>,
    ) -> (
        Result<helm::Release, helm::Error>,
        Option<Result<(), Error>>,
    ) {
        let mut ticket = self.context.gate.ticket();
        let owner = self.object.uid().unwrap_or_default();
        let options = helm::UpgradeOptions {
            post_renderer: Some(ticket.renderer().clone()),
            labels: [(RELEASE_OWNER_LABEL.to_string(), owner)].into(),
            ..Default::default()
        };
        let upgrade = self.context.helm.upgrade_install(
            kube_context,
            &self.target.release,
            &self.chart.archive_path,
            self.values,
            options,
        );
        let admission = async {
            let request = ticket.request().await?;
            let admitted = match &request.manifest {
                Ok(manifest) => self.admit(manifest, writer).await,
                Err(too_large) => Err(Error::TooLarge(too_large.to_string())),
            };
            request.answer(admitted.is_ok());
            Some(admitted)
        };
        match future::select(pin!(upgrade), pin!(admission)).await {
            Either::Left((outcome, _)) => (outcome, None),
            Either::Right((admitted, upgrade)) => (upgrade.await, admitted),
        }
    }

    /// What Helm is about to write, before it writes any of it: every object is put to the
    /// authorizer, the objects the release keeps are noted for the status, and the namespace is
    /// made when this release makes it.
    async fn admit(&self, manifest: &str, writer: &SharedWriter<'_, '_>) -> Result<(), Error> {
        let documents = parse_documents(manifest)?;
        self.check_access(&documents).await?;
        let chart = CompositionChart {
            version: self.chart.version.clone(),
            digest: self.chart.digest.clone(),
        };
        writer
            .lock()
            .await
            .rendered(chart, kept_resources(&documents));
        if self.target.creates_namespace() {
            create_namespace(self.reach, &self.target.namespace, self.object).await?;
        }
        Ok(())
    }

    /// Every object Helm would write is checked first, so that nothing is installed halfway:
    /// it must be the composition's to write ([`confinement::check_render`]), and the
    /// authorizer must allow it.
    async fn check_access(&self, documents: &[RenderedDocument]) -> Result<(), Error> {
        let context = self.context;
        let namespace = &self.target.namespace;
        confinement::check_render(context, self.reach, self.target, self.writable, documents)
            .await?;
        let (denied, unserved) =
            access::denials(&self.reach.client, &self.reach.kinds, documents, namespace)
                .await
                .map_err(|e| Error::Kube("access review", e))?;
        if denied.is_empty() && unserved.is_empty() {
            return Ok(());
        }
        let definition = format!(
            "{}/{}",
            context.config.identity.definition.namespace, context.config.identity.definition.name
        );
        let installer = self.reach.installer(&definition);
        let message = access::explain(&denied, &unserved, namespace, &installer);
        Err(Error::PermissionsMissing(message))
    }

    /// The Helm write to make: an upgrade of a release there is, else an install. A release a
    /// crash left pending is recovered first, with an event.
    async fn recover_if_pending(
        &self,
        kube_context: &helm::KubeContext,
        live: Option<&Record>,
    ) -> Result<HelmStep, Error> {
        let Some(Record { status: state, .. }) = live else {
            return Ok(HelmStep::Install);
        };
        if !state.is_pending() {
            return Ok(HelmStep::Upgrade);
        }
        let release = &self.target.release;
        let still_there = recover(self.context, kube_context, release)
            .await
            .map_err(|error| Error::from_helm(HelmStep::Recover, error, self.withhold))?;
        let note = format!("release {release} was stuck in {state}; recovered");
        publish(
            self.context,
            self.object,
            EventType::Warning,
            "Recovered",
            &note,
        )
        .await;
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
        // A render that reads the cluster (`lookup`) may succeed once what it reads is there.
        let reads_cluster = self.withhold && matches!(error, Error::Render(_));
        let final_failure = error.is_final() && !reads_cluster;
        if final_failure && step == HelmStep::Install {
            let note = match self.definition.failed_install {
                FailedInstall::Keep => Some(KEPT_NOTE.to_string()),
                FailedInstall::Uninstall => {
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
        }
        let message = crate::runtime::error_message(&error);
        let mut entry = self.entry(Phase::Failed, revision, fingerprint, message);
        entry.final_failure = final_failure.then(|| attempt.final_failure(&error));
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
        ClusterStatus {
            name: self.target.cluster.clone(),
            namespace: self.target.namespace.clone(),
            release: self.target.release.clone(),
            revision,
            chart_version: Some(self.chart.version.clone()),
            phase,
            fingerprint,
            final_failure: None,
            message,
            drifted: Vec::new(),
            drift_unknown: false,
            health: None,
            last_transition_time: None,
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

/// The objects the release keeps. Helm installs `crds/` once and never again, and hooks come
/// and go: neither is what the release keeps.
fn kept_resources(documents: &[RenderedDocument]) -> Vec<ResourceRef> {
    documents
        .iter()
        .filter(|d| !d.is_chart_crd() && !d.is_hook())
        .map(|d| &d.object)
        .map(|o| ResourceRef {
            api_version: o.api_version.clone(),
            kind: o.kind.clone(),
            namespace: o.namespace.clone(),
            name: o.name.clone(),
        })
        .collect()
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

/// Creates the release's namespace on a remote cluster, annotated as made for `object` so that
/// it goes with the release (and only then); one that exists already is left as it is.
async fn create_namespace(reach: &Reach, name: &str, object: &DynamicObject) -> Result<(), Error> {
    use k8s_openapi::api::core::v1::Namespace;
    let namespace: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "annotations": {
            NAMESPACE_OWNER_ANNOTATION: object.uid().unwrap_or_default(),
        }},
    }))
    .map_err(|e| Error::Kube("describe the release namespace", kube::Error::SerdeError(e)))?;
    let namespaces = Api::<Namespace>::all(reach.client.clone());
    match namespaces.create(&Default::default(), &namespace).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(error) => Err(Error::Kube("create the release namespace", error)),
    }
}
