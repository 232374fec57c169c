//! The two roles: `compositor run`, the operator, and `compositor controller`, the controller
//! of one definition version. Each adds its own flags and context to the process both share.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::{CommandError, ProcessArgs, context, default_cache_dir};
use crate::api::ControllerIdentity;
use crate::chart::{self, Cache};
use crate::composition;
use crate::definition;

/// Flags of `compositor run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Image of the per-version controllers (normally the operator's own).
    #[arg(
        long,
        env = "COMPOSITOR_CONTROLLER_IMAGE",
        default_value = "compositor:latest"
    )]
    pub controller_image: String,
    /// Allow chart references to Secrets and ConfigMaps in other namespaces than the definition's.
    #[arg(long, env = "COMPOSITOR_ALLOW_CROSS_NAMESPACE_REFS")]
    pub allow_cross_namespace_refs: bool,
    /// Namespace of the Secrets that register remote clusters (default: the operator's own,
    /// POD_NAMESPACE).
    #[arg(long, env = "COMPOSITOR_CLUSTERS_NAMESPACE")]
    pub clusters_namespace: Option<String>,
    /// Seconds a deleted composition waits for the compositions that depend on it to go before
    /// its release is uninstalled anyway; passed on to every controller.
    #[arg(
        long = "dependents-timeout",
        env = "COMPOSITOR_DEPENDENTS_TIMEOUT",
        default_value_t = crate::api::DEFAULT_DEPENDENTS_TIMEOUT
    )]
    pub dependents_timeout_seconds: u64,
    /// Seconds between full resyncs of a definition.
    #[arg(long, env = "COMPOSITOR_RESYNC_SECONDS", default_value_t = 120)]
    pub resync_seconds: u64,
    /// Seconds a chart repository's version list is trusted (version ranges re-resolve after it).
    #[arg(long, env = "COMPOSITOR_CHART_POLL_SECONDS", default_value_t = 300)]
    pub chart_poll_seconds: u64,
    /// Definitions reconciled at once.
    #[arg(long, env = "COMPOSITOR_CONCURRENCY", default_value_t = 4)]
    pub concurrency: u16,
    /// Watch only this namespace.
    #[arg(long, env = "COMPOSITOR_NAMESPACE")]
    pub namespace: Option<String>,
    /// Where downloaded charts are cached.
    #[arg(long, env = "COMPOSITOR_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Namespace of the leader election Lease; required with --leader-elect (in a pod, set
    /// POD_NAMESPACE from the downward API).
    #[arg(long, env = "POD_NAMESPACE", required_if_eq("leader_elect", "true"))]
    pub leader_election_namespace: Option<String>,
    /// Name of the leader election Lease.
    #[arg(long, default_value = "compositor-operator")]
    pub leader_election_name: String,
    /// What both roles take.
    #[command(flatten)]
    pub process: ProcessArgs,
}

/// Where cluster Secrets are looked for when neither the flag nor POD_NAMESPACE says: the
/// namespace the chart's documentation installs into.
const DEFAULT_CLUSTERS_NAMESPACE: &str = "compositor-system";

/// `compositor run`: the operator.
pub async fn run(args: RunArgs) -> Result<(), CommandError> {
    let process = args.process.start().await?;
    let cache = Cache::new(
        args.cache_dir.unwrap_or_else(default_cache_dir),
        chart::DEFAULT_MAX_BYTES,
        Duration::from_secs(args.chart_poll_seconds),
    )
    .map_err(context("opening the chart cache"))?;
    let config = definition::Config {
        controller_image: args.controller_image,
        allow_cross_namespace_refs: args.allow_cross_namespace_refs,
        dependents_timeout_seconds: args.dependents_timeout_seconds,
        resync: Duration::from_secs(args.resync_seconds),
        concurrency: args.concurrency,
        namespace: args.namespace,
        clusters_namespace: args
            .clusters_namespace
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .unwrap_or_else(|| DEFAULT_CLUSTERS_NAMESPACE.to_string()),
    };
    let client = process.client()?;
    let lease_namespace = args.leader_election_namespace.unwrap_or_default();
    let election = process
        .elect(client.clone(), lease_namespace, args.leader_election_name)
        .await?;
    let operator = definition::Context::new(
        client,
        config,
        process.engine.clone(),
        cache,
        process.metrics.clone(),
    );
    let operator = std::sync::Arc::new(operator);
    process
        .serve("operator", election, |shutdown| {
            definition::run(operator, shutdown)
        })
        .await
}

/// Flags of `compositor controller`.
#[derive(Args, Debug)]
pub struct ControllerArgs {
    /// Who the controller is, as the operator says.
    #[command(flatten)]
    pub identity: ControllerIdentity,
    /// How many times a deleted composition's release on an unreachable remote cluster is tried
    /// before it is abandoned with an UninstallAbandoned event.
    #[arg(
        long,
        env = "COMPOSITOR_REMOTE_UNINSTALL_ATTEMPTS",
        default_value_t = 5
    )]
    pub remote_uninstall_attempts: u32,
    /// Compositions reconciled at once, shared among namespaces in turn.
    #[arg(long, env = "COMPOSITOR_WORKERS", default_value_t = 4)]
    pub workers: u16,
    /// Seconds between resyncs of a composition (an unchanged one costs no Helm write).
    #[arg(long, env = "COMPOSITOR_RESYNC_SECONDS", default_value_t = 300)]
    pub resync_seconds: u64,
    /// Where downloaded charts are cached (default: a folder in the temporary directory).
    #[arg(long, env = "COMPOSITOR_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Namespace of the leader election Lease (default: the definition's namespace, where the
    /// operator grants the controller access to its Lease).
    #[arg(long, env = "POD_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// Name of the leader election Lease (default: `<resource>-<version>-controller`, the name
    /// the operator grants the controller access to).
    #[arg(long)]
    pub leader_election_name: Option<String>,
    /// What both roles take.
    #[command(flatten)]
    pub process: ProcessArgs,
}

/// `compositor controller`: the controller of one definition version.
pub async fn controller(args: ControllerArgs) -> Result<(), CommandError> {
    let process = args.process.start().await?;
    let cache_dir = args
        .cache_dir
        .unwrap_or_else(|| std::env::temp_dir().join("compositor-charts"));
    let cache = Cache::open(cache_dir).map_err(context("opening the chart cache"))?;
    let identity = args.identity;
    let dependents_timeout = Duration::from_secs(identity.dependents_timeout_seconds);
    let lease_namespace = args
        .leader_election_namespace
        .unwrap_or_else(|| identity.definition.namespace.clone());
    let lease_name = args.leader_election_name.unwrap_or_else(|| identity.name());
    let election = process
        .elect(process.client()?, lease_namespace, lease_name)
        .await?;
    let config = composition::Config {
        identity,
        workers: args.workers,
        resync: Duration::from_secs(args.resync_seconds),
        remote_uninstall_attempts: args.remote_uninstall_attempts,
        dependents_timeout,
    };
    // Built before leading (it only reads), so that a standby takes over without delay.
    let controller = composition::Context::new(
        process.kube_config.clone(),
        config,
        process.engine.clone(),
        cache,
        process.metrics.clone(),
    )
    .await
    .map_err(|error| -> CommandError { format!("starting the controller: {error}").into() })?;
    let controller = std::sync::Arc::new(controller);
    process
        .serve("controller", election, |shutdown| {
            composition::run(controller, shutdown)
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ObjectKey;
    use clap::Parser;

    #[derive(Parser)]
    struct Controller {
        #[command(flatten)]
        args: ControllerArgs,
    }

    #[test]
    fn the_controller_starts_with_what_the_operator_renders() {
        let identity = ControllerIdentity {
            group: "apps.example.com".into(),
            version: "v1".into(),
            plural: "apps".into(),
            definition: ObjectKey::new("demo", "app"),
            allow_cross_namespace_refs: true,
            clusters_namespace: Some("clusters".into()),
            dependents_timeout_seconds: 60,
        };
        let parsed = Controller::try_parse_from(identity.args()).unwrap().args;
        assert_eq!(parsed.identity, identity);
        assert_eq!(parsed.workers, 4, "the rest keep their defaults");
    }
}
