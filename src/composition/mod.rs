//! The per-version controller: every composition of one CRD version becomes a Helm release.
//!
//! One reconcile, stopping at the first problem with a condition that names it: read the
//! definition → values (validated against the chart's own schema) → fingerprint (unchanged means
//! no Helm call) → render, and put every object Helm would write to the authorizer → recover a
//! release stuck mid-operation → `helm upgrade --install` → status.

mod access;
mod handover;
mod kubeconfig;
mod values;

pub use kubeconfig::kubeconfig_for;
pub use values::{fingerprint, merged_over, release_name, values_of};

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::discovery::{Scope, pinned_kind};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event, finalizer};
use kube::runtime::{PredicateConfig, WatchStreamExt, reflector, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use crate::api::{
    ClusterStatus, CompositionChart, CompositionDefinition, CompositionStatus, FINALIZER,
    MOVE_ANNOTATION, NAMESPACE_OWNER_ANNOTATION, NamespacePlacement, Phase,
    RELEASE_NAME_ANNOTATION, ResourceRef, VERSION_LABEL, find_condition, is_paused,
    remove_condition, set_condition,
};
use crate::chart::{self, Cache, Fetched};
use crate::helm::{self, parse_documents};
use crate::runtime::{Metrics, ReconcileOutcome};
use crate::schema;

/// Field manager of the controller's writes.
const FIELD_MANAGER: &str = "compositor-controller";
/// Name of the management cluster in `status.clusters`.
const LOCAL_CLUSTER: &str = "local";

/// Why a composition is not (yet) installed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The definition cannot be read or has not resolved this version yet.
    #[error("definition {0} is not ready for this version")]
    DefinitionNotReady(String),
    /// The chart could not be fetched.
    #[error(transparent)]
    Chart(#[from] chart::Error),
    /// The values break the chart's schema.
    #[error("values do not match the chart's schema: {0}")]
    InvalidValues(String),
    /// The release name is unusable.
    #[error("{0}")]
    ReleaseName(String),
    /// The chart does not render with these values.
    #[error("the chart does not render: {0}")]
    Render(#[source] helm::Error),
    /// The rendered manifest is not a list of objects.
    #[error(transparent)]
    Manifest(#[from] helm::ManifestError),
    /// The chart would write objects this controller may not write.
    #[error("{0}")]
    PermissionsMissing(String),
    /// The operator has not granted this controller the release namespace yet (it does so
    /// once it sees the composition).
    #[error("waiting for access to namespace {0}, which the operator grants for each composition")]
    AccessPending(String),
    /// A Helm operation on the release failed.
    #[error("{0} failed")]
    Helm(HelmStep, #[source] helm::Error),
    /// Helm cannot be handed the controller's credentials.
    #[error(transparent)]
    Kubeconfig(#[from] kubeconfig::Error),
    /// The values validator failed.
    #[error(transparent)]
    Schema(#[from] schema::Error),
    /// The Kubernetes API failed.
    #[error("Kubernetes API request failed ({0})")]
    Kube(&'static str, #[source] kube::Error),
    /// The finalizer helper failed.
    #[error("finalizer failed")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

impl Error {
    /// The condition reason.
    fn reason(&self) -> &'static str {
        match self {
            Error::DefinitionNotReady(_) => "DefinitionNotReady",
            Error::Chart(error) => error.reason(),
            Error::InvalidValues(_) => "InvalidValues",
            Error::ReleaseName(_) => "InvalidReleaseName",
            Error::Render(_) | Error::Manifest(_) => "RenderFailed",
            Error::PermissionsMissing(_) => "PermissionsMissing",
            Error::AccessPending(_) => "AccessPending",
            Error::Helm(step, _) => step.reason(),
            Error::Kubeconfig(_) => "CredentialsUnusable",
            Error::Schema(_) => "InvalidSchema",
            Error::Kube(..) | Error::Finalizer(_) => "KubernetesAPIError",
        }
    }

    /// Errors only a change of the composition (or its definition) can fix.
    fn is_terminal(&self) -> bool {
        matches!(
            self,
            Error::InvalidValues(_)
                | Error::ReleaseName(_)
                | Error::Render(_)
                | Error::Manifest(_)
                | Error::PermissionsMissing(_)
        )
    }

    /// When to look again. A change of the composition brings a terminal error back at once;
    /// missing permissions may also be on their way, since the operator binds the controller's
    /// role in a new release namespace only once it sees a composition there.
    fn retry_after(&self) -> Duration {
        match self {
            Error::AccessPending(_) => Duration::from_secs(2),
            Error::PermissionsMissing(_) => Duration::from_secs(30),
            error if error.is_terminal() => Duration::from_secs(300),
            _ => Duration::from_secs(10),
        }
    }
}

/// The Helm operation on a release that failed; each has a reason of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HelmStep {
    /// The first install.
    Install,
    /// An upgrade of an existing release.
    Upgrade,
    /// Rolling back or removing a release stuck mid-operation.
    Recover,
    /// Removing the release of a deleted composition.
    Uninstall,
}

impl HelmStep {
    /// The condition and event reason.
    fn reason(self) -> &'static str {
        match self {
            HelmStep::Install => "InstallFailed",
            HelmStep::Upgrade => "UpgradeFailed",
            HelmStep::Recover => "RecoveryFailed",
            HelmStep::Uninstall => "UninstallFailed",
        }
    }
}

impl std::fmt::Display for HelmStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HelmStep::Install => "installing the release",
            HelmStep::Upgrade => "upgrading the release",
            HelmStep::Recover => "recovering the release",
            HelmStep::Uninstall => "uninstalling the release",
        })
    }
}

/// Which composition resource and definition this controller serves.
#[derive(Clone, Debug)]
pub struct Config {
    /// API group of the generated CRD.
    pub group: String,
    /// The CRD version this controller owns.
    pub version: String,
    /// Plural resource name.
    pub resource: String,
    /// Namespace of the definition.
    pub definition_namespace: String,
    /// Name of the definition.
    pub definition_name: String,
    /// Compositions reconciled at once.
    pub workers: u16,
    /// Reconcile every composition at least this often.
    pub resync: Duration,
    /// Whether the chart source may name Secrets and ConfigMaps in other namespaces than the
    /// definition's (as the operator allows).
    pub allow_cross_namespace_refs: bool,
}

/// What every reconcile shares.
pub struct Context {
    client: Client,
    kube_config: kube::Config,
    config: Config,
    helm: helm::Engine,
    helm_version: String,
    cache: Cache,
    recorder: Recorder,
    metrics: Arc<Metrics>,
    resource: ApiResource,
    kinds: access::Kinds,
}

impl Context {
    /// A context; asks Helm for its version once (it is part of every fingerprint).
    pub async fn new(
        kube_config: kube::Config,
        config: Config,
        helm: helm::Engine,
        cache: Cache,
        metrics: Arc<Metrics>,
    ) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        let client = crate::runtime::client(kube_config.clone(), metrics.clone())?;
        // Server-side apply of list items without their key (a port without `protocol`) fails
        // before Kubernetes 1.22, so older clusters get client-side apply.
        let server = client.apiserver_version().await?;
        let server_side = (
            server.major.as_str(),
            server
                .minor
                .trim_end_matches('+')
                .parse::<u32>()
                .unwrap_or(u32::MAX),
        ) >= ("1", 22);
        let helm = helm.with_server_side(server_side);
        // How Helm applies is part of what an install depends on.
        let helm_version = format!("{} server-side={server_side}", helm.version().await?);
        let resource = discover(&client, &config.group, &config.version, &config.resource).await?;
        let reporter = Reporter {
            controller: format!("compositor-{}-{}", config.resource, config.version),
            instance: std::env::var("POD_NAME").ok(),
        };
        Ok(Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            kube_config,
            config,
            helm,
            helm_version,
            cache,
            metrics,
            resource,
            kinds: access::Kinds::default(),
        })
    }
}

/// The ApiResource of `plural` in `group`/`version`, by discovery.
async fn discover(
    client: &Client,
    group: &str,
    version: &str,
    plural: &str,
) -> Result<ApiResource, kube::Error> {
    let discovered = kube::discovery::oneshot::pinned_group(
        client,
        &kube::core::GroupVersion::gv(group, version),
    )
    .await?;
    discovered
        .versioned_resources(version)
        .into_iter()
        .map(|(resource, _)| resource)
        .find(|resource| resource.plural == plural)
        .ok_or_else(|| {
            kube::Error::Discovery(kube::error::DiscoveryError::MissingResource(
                plural.to_string(),
            ))
        })
}

/// Runs the controller until `shutdown` resolves.
pub async fn run(
    context: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let api = Api::<DynamicObject>::all_with(context.client.clone(), &context.resource);
    let writer = reflector::store::Writer::new(context.resource.clone());
    let reader = writer.as_reader();
    let phase = crate::runtime::composition_phase(&context.config.version);
    let counted = crate::runtime::Counted::Compositions;
    context.metrics.count_phases(counted, reader.clone(), phase);
    let changes = watcher(api, watcher::Config::default())
        .backoff(crate::runtime::watch_backoff())
        .reflect(writer)
        .applied_objects()
        .predicate_filter(asked_for, PredicateConfig::default());
    Controller::for_stream_with(changes, reader, context.resource.clone())
        .trigger_backoff(crate::runtime::watch_backoff())
        .with_config(
            kube::runtime::controller::Config::default().concurrency(context.config.workers),
        )
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "reconcile ended with an error");
            }
        })
        .await;
}

/// What a user can change: the spec (through the generation) and the metadata. The status is
/// the controller's own, so its writes trigger nothing, and a failing composition is retried on
/// the error policy's schedule rather than at once.
fn asked_for(object: &DynamicObject) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let meta = &object.metadata;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    meta.generation.hash(&mut hasher);
    meta.labels.hash(&mut hasher);
    meta.annotations.hash(&mut hasher);
    meta.finalizers.hash(&mut hasher);
    meta.deletion_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .hash(&mut hasher);
    Some(hasher.finish())
}

fn error_policy(object: Arc<DynamicObject>, error: &Error, _context: Arc<Context>) -> Action {
    let message = crate::runtime::error_message(error);
    if error.is_terminal() {
        tracing::info!(composition = %object.name_any(), error = %message, "waiting for a change");
    } else {
        tracing::warn!(composition = %object.name_any(), error = %message, "reconcile failed");
    }
    Action::requeue(error.retry_after())
}

#[tracing::instrument(skip(object, context), fields(composition = %object.name_any()))]
async fn reconcile(object: Arc<DynamicObject>, context: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = reconcile_inner(object, &context).await;
    let outcome = if result.is_ok() {
        ReconcileOutcome::Success
    } else {
        ReconcileOutcome::Error
    };
    context.metrics.reconciled(outcome, started.elapsed());
    result
}

async fn reconcile_inner(cached: Arc<DynamicObject>, context: &Context) -> Result<Action, Error> {
    let namespace = cached.namespace().unwrap_or_default();
    let api = Api::<DynamicObject>::namespaced_with(
        context.client.clone(),
        &namespace,
        &context.resource,
    );
    // The cache may not have this controller's last status write yet, and the fingerprint in
    // that status is what keeps an unchanged release from being upgraded again.
    let Some(object) = api
        .get_opt(&cached.name_any())
        .await
        .map_err(|e| Error::Kube("read composition", e))?
    else {
        return Ok(Action::await_change());
    };
    let object = Arc::new(object);
    let definition = Api::<CompositionDefinition>::namespaced(
        context.client.clone(),
        &context.config.definition_namespace,
    )
    .get(&context.config.definition_name)
    .await
    .map_err(|e| Error::Kube("read definition", e))?;
    let current = definition
        .status
        .as_ref()
        .and_then(|s| s.crd.as_ref())
        .map(|crd| crd.stored_version.clone());
    let mine = &context.config.version;
    match object.labels().get(VERSION_LABEL) {
        Some(version) if version == mine => {}
        // Unlabelled compositions belong to the current version; labelling them is a change that
        // brings them back here.
        None if current.as_deref() == Some(mine.as_str()) => {
            let label = json!({"metadata": {"labels": {VERSION_LABEL: mine}}});
            api.patch(
                &object.name_any(),
                &PatchParams::default(),
                &Patch::Merge(label),
            )
            .await
            .map_err(|e| Error::Kube("label composition", e))?;
            return Ok(Action::await_change());
        }
        _ => return Ok(Action::await_change()),
    }
    if let Some(target) = object.annotations().get(MOVE_ANNOTATION)
        && target != mine
        && object.metadata.deletion_timestamp.is_none()
        && !is_paused(&object.metadata)
    {
        let note = format!("handed over from {mine} to {target}");
        handover::relabel(context, &api, &object, target, false, &note).await?;
        return Ok(Action::await_change());
    }
    if is_paused(&object.metadata) {
        let mut writer = StatusWriter::new(&api, &object);
        let mut status = writer.written.clone();
        status.phase = Some(Phase::Paused);
        set_condition(
            &mut status.conditions,
            "Ready",
            false,
            "Paused",
            "reconciliation is paused by annotation",
            object.metadata.generation,
        );
        writer.write(&status).await?;
        return Ok(Action::await_change());
    }
    finalizer(&api, FINALIZER, object, |event| async {
        match event {
            Event::Apply(object) => apply(&object, &definition, context, &api).await,
            Event::Cleanup(object) => {
                let result = cleanup(&object, &definition, context).await;
                match result {
                    // The object is gone once the finalizer is removed: nothing to record.
                    Ok(action) => Ok(action),
                    Err(error) => {
                        let writer = StatusWriter::new(&api, &object);
                        let status = writer.written.clone();
                        writer.finish(context, status, Err(error)).await
                    }
                }
            }
        }
    })
    .await
    .map_err(|error| match error {
        kube::runtime::finalizer::Error::ApplyFailed(error)
        | kube::runtime::finalizer::Error::CleanupFailed(error) => error,
        other => Error::Finalizer(Box::new(other)),
    })
}

fn status_of(object: &DynamicObject) -> CompositionStatus {
    object
        .data
        .get("status")
        .cloned()
        .and_then(|s| serde_json::from_value(s).ok())
        .unwrap_or_default()
}

/// Where a composition's release goes.
struct Placement {
    release: String,
    namespace: String,
}

fn placement(
    object: &DynamicObject,
    definition: &CompositionDefinition,
) -> Result<Placement, Error> {
    let release = release_name(
        object
            .annotations()
            .get(RELEASE_NAME_ANNOTATION)
            .map(String::as_str),
        &object.name_any(),
    )
    .map_err(Error::ReleaseName)?;
    let namespace = match definition.spec.placement.namespace {
        NamespacePlacement::Composition => object.namespace().unwrap_or_default(),
        NamespacePlacement::CompositionName => object.name_any(),
    };
    Ok(Placement { release, namespace })
}

async fn fetch_chart(
    definition: &CompositionDefinition,
    context: &Context,
) -> Result<Fetched, Error> {
    let mine = &context.config.version;
    let chart_version = definition
        .status
        .as_ref()
        .and_then(|s| s.versions.iter().find(|v| &v.version == mine))
        .map(|v| v.chart_version.clone())
        .ok_or_else(|| Error::DefinitionNotReady(definition.name_any()))?;
    let policy = chart::credentials::RefPolicy {
        namespace: context.config.definition_namespace.clone(),
        allow_cross_namespace: context.config.allow_cross_namespace_refs,
    };
    let mut reference =
        chart::credentials::resolve(&context.client, &policy, &definition.spec.chart).await?;
    reference.version = Some(chart_version);
    Ok(chart::fetch(&reference, &context.cache).await?)
}

async fn apply(
    object: &DynamicObject,
    definition: &CompositionDefinition,
    context: &Context,
    api: &Api<DynamicObject>,
) -> Result<Action, Error> {
    if let Some(refusal) = handover::refused_move(object, definition, context).await? {
        let note = refusal.to_string();
        handover::relabel(context, api, object, &refusal.back_to, true, &note).await?;
        return Ok(Action::await_change());
    }
    let mut writer = StatusWriter::new(api, object);
    let mut status = writer.written.clone();
    let result = install(object, definition, context, &mut writer, &mut status).await;
    writer.finish(context, status, result).await
}

/// A composition's status as last written, so that only changes are written.
struct StatusWriter<'a> {
    api: &'a Api<DynamicObject>,
    object: &'a DynamicObject,
    /// The status the reconcile started from; events compare against it.
    initial: CompositionStatus,
    written: CompositionStatus,
}

impl<'a> StatusWriter<'a> {
    fn new(api: &'a Api<DynamicObject>, object: &'a DynamicObject) -> Self {
        let initial = status_of(object);
        StatusWriter {
            api,
            object,
            written: initial.clone(),
            initial,
        }
    }

    async fn write(&mut self, status: &CompositionStatus) -> Result<(), Error> {
        if *status != self.written {
            write_status(self.api, self.object, status).await?;
            self.written = status.clone();
        }
        Ok(())
    }

    /// Records how the reconcile ended, publishes the transition, and passes the result on.
    async fn finish(
        mut self,
        context: &Context,
        mut status: CompositionStatus,
        result: Result<Action, Error>,
    ) -> Result<Action, Error> {
        record_outcome(&mut status, &result, self.object.metadata.generation);
        publish_transition(context, self.object, &self.initial, &status).await;
        self.write(&status).await?;
        result
    }
}

/// The outcome of a reconcile, kstatus-style: Ready, plus Stalled when only a change of the
/// composition can help or Reconciling while a retry is due; neither once Ready.
fn record_outcome(
    status: &mut CompositionStatus,
    result: &Result<Action, Error>,
    generation: Option<i64>,
) {
    let conditions = &mut status.conditions;
    match result {
        Ok(_) => {
            status.phase = Some(Phase::Ready);
            set_condition(
                conditions,
                "Installed",
                true,
                "Installed",
                "the release is deployed",
                generation,
            );
            set_condition(
                conditions,
                "Ready",
                true,
                "Ready",
                "the release is deployed and up to date",
                generation,
            );
            remove_condition(conditions, "Reconciling");
            remove_condition(conditions, "Stalled");
            status.observed_generation = generation;
        }
        Err(error) => {
            let message = crate::runtime::error_message(error);
            status.phase = Some(Phase::Failed);
            set_condition(
                conditions,
                "Ready",
                false,
                error.reason(),
                &message,
                generation,
            );
            if error.is_terminal() {
                set_condition(
                    conditions,
                    "Stalled",
                    true,
                    error.reason(),
                    &message,
                    generation,
                );
                remove_condition(conditions, "Reconciling");
                status.observed_generation = generation;
            } else {
                set_condition(
                    conditions,
                    "Reconciling",
                    true,
                    "Retrying",
                    &format!("retrying after {}", error.reason()),
                    generation,
                );
                remove_condition(conditions, "Stalled");
            }
        }
    }
}

/// Installs or upgrades the release unless its fingerprint says nothing changed.
async fn install(
    object: &DynamicObject,
    definition: &CompositionDefinition,
    context: &Context,
    writer: &mut StatusWriter<'_>,
    status: &mut CompositionStatus,
) -> Result<Action, Error> {
    let fetched = fetch_chart(definition, context).await?;
    let values = values_of(object.data.get("spec"));
    let violations = schema::validate_package(
        &merged_over(&fetched.package.values, &values),
        &fetched.package,
    )?;
    if !violations.is_empty() {
        let listed: Vec<String> = violations.iter().map(ToString::to_string).collect();
        return Err(Error::InvalidValues(listed.join("; ")));
    }
    let placement = placement(object, definition)?;
    let fingerprint = fingerprint(
        &fetched.digest,
        &values,
        LOCAL_CLUSTER,
        &placement.namespace,
        &context.helm_version,
    );
    let recorded = status
        .clusters
        .iter()
        .find(|c| c.name == LOCAL_CLUSTER)
        .cloned();
    // Helm's own records, read without a `helm` process.
    let live = release_record(context, &placement).await?;
    // The same inputs rendered, passed the RBAC check and were installed before: nothing to do
    // while that revision is still the deployed one and its objects are still there.
    if let Some(recorded) = &recorded
        && recorded.fingerprint.as_deref() == Some(fingerprint.as_str())
        && recorded.release == placement.release
        && live.as_ref().is_some_and(|(revision, state)| {
            *state == helm::ReleaseStatus::Deployed
                && i64::try_from(*revision).ok() == recorded.revision
        })
        && resources_exist(&context.client, &status.resources, &placement.namespace).await?
    {
        return Ok(Action::requeue(context.config.resync));
    }

    let manifest = context
        .helm
        .template(
            &fetched.archive_path,
            &placement.release,
            &placement.namespace,
            &values,
        )
        .await
        .map_err(Error::Render)?;
    let documents = parse_documents(&manifest)?;
    let (denied, unserved) = access::denials(
        &context.client,
        &context.kinds,
        &documents,
        &placement.namespace,
    )
    .await
    .map_err(|e| Error::Kube("access review", e))?;
    if !denied.is_empty() || !unserved.is_empty() {
        let definition = format!(
            "{}/{}",
            context.config.definition_namespace, context.config.definition_name
        );
        let message = access::explain(&denied, &unserved, &placement.namespace, &definition);
        return Err(Error::PermissionsMissing(message));
    }
    status.chart = Some(CompositionChart {
        version: fetched.version.clone(),
        digest: fetched.digest.clone(),
    });
    // Helm installs `crds/` once and never again, and hooks come and go: neither is what the
    // release keeps.
    status.resources = documents
        .iter()
        .filter(|d| !d.is_chart_crd() && !d.is_hook())
        .map(|d| &d.object)
        .map(|o| ResourceRef {
            api_version: o.api_version.clone(),
            kind: o.kind.clone(),
            namespace: o.namespace.clone(),
            name: o.name.clone(),
        })
        .collect();
    let target = target(context, &placement.namespace)?;
    let mut step = match live {
        Some(_) => HelmStep::Upgrade,
        None => HelmStep::Install,
    };
    if let Some((_, state)) = &live
        && state.is_pending()
    {
        if !recover(context, &target, &placement.release).await? {
            step = HelmStep::Install;
        }
        publish(
            context,
            object,
            EventType::Warning,
            "Recovered",
            &format!(
                "release {} was stuck in {state}; recovered",
                placement.release
            ),
        )
        .await;
    }

    // A Helm write may take minutes; say so first.
    status.phase = Some(Phase::Progressing);
    set_condition(
        &mut status.conditions,
        "Reconciling",
        true,
        "Progressing",
        &format!("{step} {}", placement.release),
        object.metadata.generation,
    );
    writer.write(status).await?;
    let outcome = context
        .helm
        .upgrade_install(
            &target,
            &placement.release,
            &fetched.archive_path,
            &values,
            helm::UpgradeOptions::default(),
        )
        .await;
    let entry = |phase, revision, fingerprint, message| ClusterStatus {
        name: LOCAL_CLUSTER.to_string(),
        namespace: placement.namespace.clone(),
        release: placement.release.clone(),
        revision,
        phase,
        fingerprint,
        message,
        last_transition_time: None,
    };
    match outcome {
        Ok(release) => {
            if let Some(previous) = recorded.filter(|c| c.release != placement.release) {
                replaced(context, object, &previous, &placement.release).await?;
            }
            let revision = i64::try_from(release.revision).ok();
            record_cluster(
                status,
                entry(Phase::Ready, revision, Some(fingerprint), String::new()),
            );
            let reason = match step {
                HelmStep::Install => "Installed",
                _ => "Upgraded",
            };
            publish(
                context,
                object,
                EventType::Normal,
                reason,
                &format!(
                    "release {} revision {}",
                    placement.release, release.revision
                ),
            )
            .await;
            Ok(Action::requeue(context.config.resync))
        }
        Err(error) => {
            let error = helm_failure(step, error);
            let message = crate::runtime::error_message(&error);
            let (revision, fingerprint) = recorded
                .map(|c| (c.revision, c.fingerprint))
                .unwrap_or_default();
            record_cluster(status, entry(Phase::Failed, revision, fingerprint, message));
            Err(error)
        }
    }
}

/// A renamed release (the release-name annotation changed) was installed under its new name:
/// the old one goes, as it would with `helm` by hand.
async fn replaced(
    context: &Context,
    object: &DynamicObject,
    previous: &ClusterStatus,
    current: &str,
) -> Result<(), Error> {
    let note = format!("release {} replaced by {current}", previous.release);
    uninstall(
        context,
        object,
        &previous.namespace,
        &previous.release,
        &note,
    )
    .await
}

/// Uninstalls `release` from `namespace`, with an event saying `note` when it was there (a
/// release that is gone already is fine).
async fn uninstall(
    context: &Context,
    object: &DynamicObject,
    namespace: &str,
    release: &str,
    note: &str,
) -> Result<(), Error> {
    let existed = context
        .helm
        .uninstall(&target(context, namespace)?, release)
        .await
        .map_err(|e| Error::Helm(HelmStep::Uninstall, e))?;
    if existed {
        publish(context, object, EventType::Normal, "Uninstalled", note).await;
    }
    Ok(())
}

/// Helm's view of `namespace`, with this controller's own credentials.
fn target(context: &Context, namespace: &str) -> Result<helm::Target, Error> {
    Ok(helm::Target::new(
        kubeconfig_for(&context.kube_config, namespace)?,
        namespace,
    ))
}

/// Puts `entry` in place of the cluster's entry; its transition time moves only with the phase.
fn record_cluster(status: &mut CompositionStatus, mut entry: ClusterStatus) {
    let index = status.clusters.iter().position(|c| c.name == entry.name);
    entry.last_transition_time = match index.map(|i| &status.clusters[i]) {
        Some(previous) if previous.phase == entry.phase => previous.last_transition_time.clone(),
        _ => Some(Time(Timestamp::now())),
    };
    match index {
        Some(i) => status.clusters[i] = entry,
        None => status.clusters.push(entry),
    }
}

/// A release stuck pending (a crash mid-operation) goes back to its last deployed revision, or
/// away when it never deployed. Whether the release is still there.
async fn recover(context: &Context, target: &helm::Target, release: &str) -> Result<bool, Error> {
    let failed = |e| Error::Helm(HelmStep::Recover, e);
    let history = context
        .helm
        .history(target, release)
        .await
        .map_err(failed)?;
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
                .await
                .map_err(failed)?;
            Ok(true)
        }
        None => {
            context
                .helm
                .uninstall(target, release)
                .await
                .map_err(failed)?;
            Ok(false)
        }
    }
}

/// A failed Helm step; a refusal by the authorizer is a permission problem, which retrying
/// does not fix.
fn helm_failure(step: HelmStep, error: helm::Error) -> Error {
    if error.is_forbidden() {
        Error::PermissionsMissing(format!(
            "{step} was refused: {}",
            crate::runtime::error_message(&error)
        ))
    } else {
        Error::Helm(step, error)
    }
}

/// Helm's latest record of the release, read without a `helm` process; a refusal means the
/// operator has not granted the release namespace yet.
async fn release_record(
    context: &Context,
    placement: &Placement,
) -> Result<Option<(u64, helm::ReleaseStatus)>, Error> {
    match helm::latest_record(&context.client, &placement.namespace, &placement.release).await {
        Err(kube::Error::Api(status)) if status.code == 403 => {
            Err(Error::AccessPending(placement.namespace.clone()))
        }
        result => result.map_err(|e| Error::Kube("read release records", e)),
    }
}

async fn resources_exist(
    client: &Client,
    resources: &[ResourceRef],
    namespace: &str,
) -> Result<bool, Error> {
    for object in resources {
        let (group, version) = object
            .api_version
            .rsplit_once('/')
            .unwrap_or(("", &object.api_version));
        let (resource, capabilities) =
            pinned_kind(client, &GroupVersionKind::gvk(group, version, &object.kind))
                .await
                .map_err(|e| Error::Kube("discover rendered kind", e))?;
        let api: Api<DynamicObject> = match capabilities.scope {
            Scope::Namespaced => Api::namespaced_with(
                client.clone(),
                object.namespace.as_deref().unwrap_or(namespace),
                &resource,
            ),
            Scope::Cluster => Api::all_with(client.clone(), &resource),
        };
        if api
            .get_metadata_opt(&object.name)
            .await
            .map_err(|e| Error::Kube("read rendered object", e))?
            .is_none()
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Deletion: uninstall the release, then remove the namespace compositor created for it. A
/// release whose records cannot be read in a namespace that does not exist was never installed.
async fn cleanup(
    object: &DynamicObject,
    definition: &CompositionDefinition,
    context: &Context,
) -> Result<Action, Error> {
    let placement = placement(object, definition)?;
    let namespaces = Api::<Namespace>::all(context.client.clone());
    let installed = match release_record(context, &placement).await {
        Ok(record) => record.is_some(),
        Err(Error::AccessPending(namespace)) => match namespaces.get_opt(&namespace).await {
            Ok(None) => false,
            _ => return Err(Error::AccessPending(namespace)),
        },
        Err(error) => return Err(error),
    };
    if installed {
        let note = format!("release {} uninstalled", placement.release);
        uninstall(
            context,
            object,
            &placement.namespace,
            &placement.release,
            &note,
        )
        .await?;
    }
    if definition.spec.placement.namespace == NamespacePlacement::CompositionName {
        delete_own_namespace(&namespaces, &placement.namespace, object).await?;
    }
    Ok(Action::await_change())
}

/// Deletes `name` if compositor created it for `object`; any other namespace stays.
async fn delete_own_namespace(
    namespaces: &Api<Namespace>,
    name: &str,
    object: &DynamicObject,
) -> Result<(), Error> {
    let refused = |error| match error {
        kube::Error::Api(status) if status.code == 403 => Error::AccessPending(name.to_string()),
        error => Error::Kube("delete the release namespace", error),
    };
    let Some(namespace) = namespaces.get_opt(name).await.map_err(refused)? else {
        return Ok(());
    };
    let created_for = namespace.annotations().get(NAMESPACE_OWNER_ANNOTATION);
    if object.uid().is_none() || created_for != object.uid().as_ref() {
        return Ok(());
    }
    match namespaces.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(refused(error)),
    }
}

async fn write_status(
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    status: &CompositionStatus,
) -> Result<(), Error> {
    let types = object.types.clone().unwrap_or_default();
    let patch = json!({"apiVersion": types.api_version, "kind": types.kind, "status": status});
    api.patch_status(
        &object.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map_err(|e| Error::Kube("write status", e))?;
    Ok(())
}

/// An event when Ready changes status or reason, never on a plain resync.
async fn publish_transition(
    context: &Context,
    object: &DynamicObject,
    before: &CompositionStatus,
    after: &CompositionStatus,
) {
    let old =
        find_condition(&before.conditions, "Ready").map(|c| (c.status.clone(), c.reason.clone()));
    let Some(new) = find_condition(&after.conditions, "Ready") else {
        return;
    };
    if new.status == "True" || old == Some((new.status.clone(), new.reason.clone())) {
        return;
    }
    publish(
        context,
        object,
        EventType::Warning,
        &new.reason,
        &new.message,
    )
    .await;
}

async fn publish(
    context: &Context,
    object: &DynamicObject,
    type_: EventType,
    reason: &str,
    note: &str,
) {
    let event = KubeEvent {
        type_,
        reason: reason.to_string(),
        note: Some(note.chars().take(1000).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(error) = context
        .recorder
        .publish(&event, &object.object_ref(&context.resource))
        .await
    {
        tracing::warn!(%error, "cannot publish event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn types(status: &CompositionStatus) -> Vec<(&str, &str, &str)> {
        status
            .conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
            .collect()
    }

    #[test]
    fn outcomes_follow_kstatus() {
        let mut status = CompositionStatus::default();
        let transient = Err(Error::DefinitionNotReady("team/app".into()));
        record_outcome(&mut status, &transient, Some(3));
        assert_eq!(
            types(&status),
            [
                ("Ready", "False", "DefinitionNotReady"),
                ("Reconciling", "True", "Retrying")
            ]
        );
        assert_eq!(status.observed_generation, None, "a retry is still due");

        let terminal = Err(Error::InvalidValues("/replicas: not an integer".into()));
        record_outcome(&mut status, &terminal, Some(4));
        assert_eq!(
            types(&status),
            [
                ("Ready", "False", "InvalidValues"),
                ("Stalled", "True", "InvalidValues")
            ]
        );
        assert_eq!(status.observed_generation, Some(4));
        assert_eq!(status.phase, Some(Phase::Failed));
        let missing = Error::PermissionsMissing("batch/v1/Job".into());
        assert!(missing.is_terminal());
        assert!(
            missing.retry_after() < Error::ReleaseName("-".into()).retry_after(),
            "a binding may still be on its way"
        );

        record_outcome(&mut status, &Ok(Action::await_change()), Some(5));
        assert_eq!(
            types(&status),
            [
                ("Ready", "True", "Ready"),
                ("Installed", "True", "Installed")
            ]
        );
        assert_eq!(status.observed_generation, Some(5));
        assert_eq!(status.phase, Some(Phase::Ready));
    }

    #[test]
    fn a_cluster_entry_keeps_its_transition_time_while_its_phase_holds() {
        let entry = |phase, revision| ClusterStatus {
            name: LOCAL_CLUSTER.into(),
            namespace: "team".into(),
            release: "app".into(),
            revision: Some(revision),
            phase,
            fingerprint: None,
            message: String::new(),
            last_transition_time: None,
        };
        let mut status = CompositionStatus::default();
        record_cluster(&mut status, entry(Phase::Ready, 1));
        let first = status.clusters[0].last_transition_time.clone();
        assert!(first.is_some());
        std::thread::sleep(Duration::from_millis(5));
        record_cluster(&mut status, entry(Phase::Ready, 2));
        assert_eq!(status.clusters.len(), 1);
        assert_eq!(status.clusters[0].revision, Some(2));
        assert_eq!(status.clusters[0].last_transition_time, first);
        record_cluster(&mut status, entry(Phase::Failed, 2));
        assert_ne!(status.clusters[0].last_transition_time, first);
    }
}
