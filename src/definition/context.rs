//! What the operator's reconciles share: its configuration, its client and Helm, the chart
//! cache, the footprints learnt of charts, and the watches of compositions and cluster Secrets.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::Mutex;

use super::{clusters, compositions, footprint};
use crate::api::CompositionDefinition;
use crate::chart::Cache;
use crate::helm;
use crate::runtime::Metrics;
use crate::runtime::events::{Recorder, Reporter};

/// How the operator runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Image of the per-version controllers (the operator's own).
    pub controller_image: String,
    /// Allow Secret and ConfigMap references to other namespaces.
    pub allow_cross_namespace_refs: bool,
    /// How long a deleted composition waits for its dependents, in seconds; the controllers'.
    pub dependents_timeout_seconds: u64,
    /// Reconcile every definition at least this often.
    pub resync: Duration,
    /// Reconcile at most this many definitions at once.
    pub concurrency: u16,
    /// Watch only this namespace (all when `None`).
    pub namespace: Option<String>,
    /// Namespace of the Secrets that register remote clusters; controllers of definitions that
    /// place remotely may read them there.
    pub clusters_namespace: String,
}

/// What every reconcile shares.
pub struct Context {
    pub(super) client: Client,
    pub(super) config: Config,
    pub(super) helm: helm::Engine,
    pub(super) cache: Cache,
    pub(super) recorder: Recorder,
    pub(super) metrics: Arc<Metrics>,
    /// Chart footprints by chart digest (a chart's content never changes under its digest),
    /// with how many times each was learnt.
    pub(super) footprints: Mutex<BTreeMap<String, (footprint::ChartFootprint, u32)>>,
    /// The composition watch of each definition.
    pub(super) compositions: compositions::Watches,
    /// The registration Secrets of the clusters namespace, and which each placement selects.
    pub(super) cluster_secrets: clusters::ClusterSecrets,
    /// Where those watches send the definitions to reconcile, taken by [`run`](super::run).
    pub(super) trigger_receiver: std::sync::Mutex<
        Option<tokio::sync::mpsc::UnboundedReceiver<ObjectRef<CompositionDefinition>>>,
    >,
    /// The operator's own username, asked once, when a chart first binds a subject that
    /// needs approval.
    operator: tokio::sync::OnceCell<String>,
}

impl Context {
    /// A context for the operator; starts watching the registration Secrets (it must be called
    /// within a Tokio runtime).
    pub fn new(
        client: Client,
        config: Config,
        helm: helm::Engine,
        cache: Cache,
        metrics: Arc<Metrics>,
    ) -> Self {
        let reporter = Reporter {
            controller: "compositor".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        let (compositions, trigger_receiver) = compositions::Watches::new(client.clone());
        let cluster_secrets =
            clusters::ClusterSecrets::start(client.clone(), &config.clusters_namespace);
        Context {
            cluster_secrets,
            recorder: Recorder::new(client.clone(), reporter),
            client,
            config,
            helm,
            cache,
            metrics,
            footprints: Mutex::default(),
            compositions,
            trigger_receiver: std::sync::Mutex::new(Some(trigger_receiver)),
            operator: tokio::sync::OnceCell::new(),
        }
    }

    /// The operator's username, as the API server knows it (a SelfSubjectReview, which every
    /// authenticated user may ask).
    pub(super) async fn operator_username(&self) -> Result<String, kube::Error> {
        use k8s_openapi::api::authentication::v1::SelfSubjectReview;
        let ask = || async {
            let reviews = kube::api::Api::<SelfSubjectReview>::all(self.client.clone());
            let review = reviews
                .create(&Default::default(), &SelfSubjectReview::default())
                .await?;
            let user = review.status.and_then(|status| status.user_info);
            Ok(user.and_then(|user| user.username).unwrap_or_default())
        };
        self.operator.get_or_try_init(ask).await.cloned()
    }
}
