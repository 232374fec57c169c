//! What the controller's reconciles share: its configuration, its clients and Helm, the
//! definition and clusters as watches keep them, and the caches of the steps that read the
//! cluster (kinds, remote clusters, the last chart, drift watches, the dependency graph). What a
//! step remembers of its own between reconciles belongs to that step's service; the backoff and
//! the echo filter are the driver's (`watches`).

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::core::ApiResource;

use super::{access, dependencies, drift, inputs, reach, values_from};
use crate::api::ControllerIdentity;
use crate::api::GeneratedResource;
use crate::chart::Cache;
use crate::helm;
use crate::runtime::Metrics;
use crate::runtime::events::{Recorder, Reporter};

/// Which composition resource and definition this controller serves.
#[derive(Clone, Debug)]
pub struct Config {
    /// Which definition version this controller serves, as the operator started it.
    pub identity: ControllerIdentity,
    /// Compositions reconciled at once.
    pub workers: u16,
    /// Reconcile every composition at least this often.
    pub resync: Duration,
    /// How many times a deleted composition's release on an unreachable cluster is tried
    /// before it is abandoned with an event, so that deletion never hangs.
    pub remote_uninstall_attempts: u32,
    /// How long a deleted composition waits for its dependents to go before it goes anyway.
    pub dependents_timeout: Duration,
}

/// What every reconcile shares.
pub struct Context {
    pub(super) client: Client,
    pub(super) kube_config: Arc<kube::Config>,
    pub(super) config: Config,
    pub(super) helm: helm::Engine,
    pub(super) helm_version: String,
    pub(super) cache: Cache,
    pub(super) recorder: Recorder,
    pub(super) metrics: Arc<Metrics>,
    pub(super) resource: ApiResource,
    pub(super) kinds: Arc<access::Kinds>,
    pub(super) clusters: Option<crate::clusters::Registry>,
    pub(super) definition: inputs::DefinitionWatch,
    /// Discovery results and the last client of each remote cluster, and how its releases'
    /// uninstalls went.
    pub(super) remotes: reach::Remotes,
    /// The chart last fetched, so that an unchanged one is not read again.
    pub(super) last_chart: inputs::LastChart,
    /// `--workers` permits, shared out among namespaces in turn.
    pub(super) workers: crate::runtime::FairGate,
    /// Where Helm's rendered manifests are admitted before Helm writes them.
    pub(super) gate: helm::Gate,
    /// What the releases rendered, watched for drift.
    pub(super) drift: drift::Watches,
    /// Which compositions wait for which, as the watches of this kind and those named see them.
    pub(super) dependencies: dependencies::Dependencies,
    /// The objects compositions take values from, watched by name.
    pub(super) values_sources: values_from::Sources,
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
        let resource = discover(
            &client,
            &config.identity.group,
            &config.identity.version,
            &config.identity.plural,
        )
        .await?;
        let reporter = Reporter {
            controller: config.identity.reporter(),
            instance: std::env::var("POD_NAME").ok(),
        };
        let definition = inputs::DefinitionWatch::start(
            client.clone(),
            &config.identity.definition.namespace,
            &config.identity.definition.name,
        );
        let clusters = match &config.identity.clusters_namespace {
            Some(namespace) => {
                let selection = definition.selection();
                let reading = (namespace.as_str(), selection);
                Some(registry(&client, reading, &kube_config, &metrics).await?)
            }
            None => None,
        };
        Ok(Context {
            recorder: Recorder::new(client.clone(), reporter),
            clusters,
            definition,
            remotes: reach::Remotes::default(),
            last_chart: inputs::LastChart::default(),
            workers: crate::runtime::FairGate::new(config.workers.into()),
            gate: helm::Gate::start(std::env::current_exe()?)?,
            drift: drift::Watches::new(metrics.clone()),
            dependencies: dependencies::Dependencies::new(client.clone(), &resource),
            values_sources: values_from::Sources::new(kube_config.clone(), metrics.clone()),
            client,
            kube_config: Arc::new(kube_config),
            config,
            helm,
            helm_version,
            cache,
            metrics,
            resource,
            kinds: Arc::default(),
        })
    }
}

impl Context {
    /// The resource this controller serves, as its bundle names it.
    pub(super) fn generated_resource(&self) -> GeneratedResource {
        GeneratedResource {
            group: self.config.identity.group.clone(),
            version: self.config.identity.version.clone(),
            plural: self.config.identity.plural.clone(),
        }
    }

    /// The username of the release identity of `namespace` on the management cluster, as which
    /// Helm runs there.
    pub(super) fn release_identity(&self, namespace: &str) -> String {
        let resource = self.generated_resource();
        let name =
            crate::api::release_identity(&self.config.identity.definition.namespace, &resource);
        format!("system:serviceaccount:{namespace}:{name}")
    }

    /// Namespaces besides Kubernetes' own that are never a composition's own: the
    /// definition's, and the operator's when the controller knows it (clusters are registered
    /// there).
    pub(super) fn reserved(&self) -> Vec<&str> {
        let mut reserved = vec![self.config.identity.definition.namespace.as_str()];
        reserved.extend(self.config.identity.clusters_namespace.as_deref());
        reserved
    }
}

/// How long the cluster Secrets may take to be published and listed at start.
const REGISTRY_START: Duration = Duration::from_secs(30);

/// The cluster registry of the Secrets in `namespace` that `selection` names, once the
/// selection is published and they are listed: a registry that has not yet would make
/// registered clusters look unplaced, and their releases removed.
async fn registry(
    client: &Client,
    (namespace, selection): (&str, crate::clusters::Selection),
    kube_config: &kube::Config,
    metrics: &Arc<Metrics>,
) -> Result<crate::clusters::Registry, String> {
    let registry = crate::clusters::Registry::counted(
        client.clone(),
        namespace,
        kube_config.clone(),
        selection,
        metrics.clone(),
    );
    tokio::time::timeout(REGISTRY_START, registry.ready())
        .await
        .map_err(|_| {
            format!(
                "the cluster Secrets in namespace {namespace} that the definition selects were \
                 not published in its status.clusterSecrets and listed within {REGISTRY_START:?}"
            )
        })?;
    Ok(registry)
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
