//! The edge: each subcommand's flags and what it does, with errors reported with context.

use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use crate::api::{ControllerIdentity, SchemaInference};
use crate::chart::{self, Cache, ChartRef, Package};
use crate::composition;
use crate::crd::{self, BuildOptions, NameOverrides};
use crate::definition;
use crate::helm;
use crate::runtime::leader::{self, Election, MIN_LEASE_SECONDS};
use crate::runtime::{self, LogFormat, Metrics, Readiness, reconcile_while_leading, shutdown};
use crate::schema::ConvertOptions;

/// An error at the edge: what was being done, and why it failed.
pub type CommandError = Box<dyn std::error::Error + Send + Sync>;

fn context<E: std::error::Error + Send + Sync + 'static>(
    what: impl Into<String>,
) -> impl FnOnce(E) -> CommandError {
    let what = what.into();
    move |error| format!("{what}: {}", runtime::error_message(&error)).into()
}

fn default_cache_dir() -> PathBuf {
    std::env::var_os("HOME")
        .map(|home| PathBuf::from(home).join(".cache/compositor/charts"))
        .unwrap_or_else(|| std::env::temp_dir().join("compositor-charts"))
}

/// Flags of `compositor crd`.
#[derive(Args, Debug)]
pub struct CrdArgs {
    /// The chart: a directory, a `.tgz`, a Helm repository URL (with --repo), an
    /// `https://…/chart.tgz` URL, or `oci://host/path`.
    pub chart: String,
    /// Chart name inside a Helm repository, or an extra OCI path segment.
    #[arg(long)]
    pub repo: Option<String>,
    /// Chart version or semver range (for repositories and OCI).
    #[arg(long = "chart-version")]
    pub chart_version: Option<String>,
    /// Name of the CRD version (default: `v` + the chart version).
    #[arg(long)]
    pub version_name: Option<String>,
    /// API group of the generated CRD.
    #[arg(long)]
    pub group: Option<String>,
    /// Kind of the generated CRD (default: derived from the chart name).
    #[arg(long)]
    pub kind: Option<String>,
    /// Keep schema defaults that validate, and default parent objects to `{}`.
    #[arg(long)]
    pub apply_defaults: bool,
    /// When to infer the schema from values.yaml: Always, WhenMissing (no values.schema.json)
    /// or Never.
    #[arg(long, default_value = "WhenMissing", value_parser = inference)]
    pub infer: SchemaInference,
    /// A dotted values path an inferred schema leaves open to any value (repeatable; `.` for
    /// the whole spec).
    #[arg(long = "open-key")]
    pub open_keys: Vec<String>,
    /// User name for the repository or registry.
    #[arg(long)]
    pub username: Option<String>,
    /// Read the password for the repository or registry from standard input.
    #[arg(long, requires = "username")]
    pub password_stdin: bool,
    /// Skip verification of the server's TLS certificate.
    #[arg(long)]
    pub insecure_skip_tls_verify: bool,
    /// Where downloaded charts are cached.
    #[arg(long, env = "COMPOSITOR_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
}

/// `compositor crd`: prints the CRD a chart becomes on stdout, its lossy steps on stderr.
pub async fn crd(args: CrdArgs) -> Result<(), CommandError> {
    let remote = ["http://", "https://", "oci://"]
        .iter()
        .any(|scheme| args.chart.starts_with(scheme));
    let package = if remote {
        let mut reference = ChartRef {
            url: args.chart.clone(),
            repo: args.repo.clone(),
            version: args.chart_version.clone(),
            insecure_skip_verify_tls: args.insecure_skip_tls_verify,
            ..ChartRef::default()
        };
        if let Some(username) = &args.username {
            let mut password = String::new();
            if args.password_stdin {
                std::io::stdin()
                    .read_to_string(&mut password)
                    .map_err(context("reading the password from stdin"))?;
            }
            reference =
                reference.with_basic_auth(username, password.trim_end_matches(['\r', '\n']));
        }
        let cache = Cache::open(args.cache_dir.clone().unwrap_or_else(default_cache_dir))
            .map_err(context("opening the chart cache"))?;
        chart::fetch(&reference, &cache)
            .await
            .map_err(context(format!("chart {}", args.chart)))?
            .package
    } else {
        Package::load(std::path::Path::new(&args.chart))
            .map_err(context(format!("chart {}", args.chart)))?
    };
    let options = BuildOptions {
        names: NameOverrides {
            group: args.group,
            kind: args.kind,
            ..NameOverrides::default()
        },
        version_name: args.version_name,
        convert: ConvertOptions {
            apply_defaults: args.apply_defaults,
            infer: args.infer,
            open_keys: args.open_keys,
        },
        ..BuildOptions::default()
    };
    let (crd, notes) =
        crd::build(&package, &options).map_err(context(format!("chart {}", args.chart)))?;
    let yaml = crd::to_yaml(&crd).map_err(context("writing the CRD"))?;
    // Warnings and inference lines go to stderr, one per line, so stdout stays a clean manifest.
    for warning in &notes.warnings {
        eprintln!("warning: {warning}");
    }
    for line in notes.inferred.iter().flat_map(|report| report.lines()) {
        eprintln!("inferred: {line}");
    }
    print!("{yaml}");
    Ok(())
}

/// `Always`, `WhenMissing` or `Never`, as `spec.schema.infer` spells them.
fn inference(text: &str) -> Result<SchemaInference, String> {
    serde_json::from_value(serde_json::Value::String(text.to_owned()))
        .map_err(|_| format!("{text:?} is not one of Always, WhenMissing, Never"))
}

/// `compositor crds`: prints the operator's own CRDs.
pub fn crds() -> Result<(), CommandError> {
    print!(
        "{}",
        crate::api::crds_yaml().map_err(context("writing the CRDs"))?
    );
    Ok(())
}

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
    /// The helm binary (default: HELM_BIN, then PATH).
    #[arg(long)]
    pub helm: Option<PathBuf>,
    /// Seconds one helm call may take.
    #[arg(long, env = "COMPOSITOR_HELM_TIMEOUT_SECONDS", default_value_t = 300)]
    pub helm_timeout_seconds: u64,
    /// Address of the metrics and health endpoints.
    #[arg(
        long,
        env = "COMPOSITOR_METRICS_ADDRESS",
        default_value = "0.0.0.0:8080"
    )]
    pub metrics_address: SocketAddr,
    /// Log format.
    #[arg(long, env = "COMPOSITOR_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Debug logging.
    #[arg(long, env = "COMPOSITOR_DEBUG")]
    pub debug: bool,
    /// Reconcile only while holding a Lease, so that several replicas can run: one leads, the
    /// others wait (alive and ready, not reconciling) and take over when it goes.
    #[arg(long, env = "COMPOSITOR_LEADER_ELECT")]
    pub leader_elect: bool,
    /// Namespace of the leader election Lease; required with --leader-elect (in a pod, set
    /// POD_NAMESPACE from the downward API).
    #[arg(long, env = "POD_NAMESPACE", required_if_eq("leader_elect", "true"))]
    pub leader_election_namespace: Option<String>,
    /// Name of the leader election Lease.
    #[arg(long, default_value = "compositor-operator")]
    pub leader_election_name: String,
    /// Seconds a leader's Lease lasts without renewal: the longest a standby waits after its
    /// leader died. The leader renews a third of it before expiry and stops reconciling
    /// (exiting with an error) if it cannot.
    #[arg(
        long,
        env = "COMPOSITOR_LEADER_ELECTION_LEASE_SECONDS",
        default_value_t = 15,
        value_parser = clap::value_parser!(u64).range(MIN_LEASE_SECONDS..),
    )]
    pub leader_election_lease_seconds: u64,
}

/// Where cluster Secrets are looked for when neither the flag nor POD_NAMESPACE says: the
/// namespace the chart's documentation installs into.
const DEFAULT_CLUSTERS_NAMESPACE: &str = "compositor-system";

/// `compositor run`: the operator.
pub async fn run(args: RunArgs) -> Result<(), CommandError> {
    runtime::init_logging(args.log_format, args.debug);
    runtime::spawn_trimming();
    let metrics = Arc::new(Metrics::default());
    let engine = helm::Engine::locate(
        args.helm,
        Duration::from_secs(args.helm_timeout_seconds),
        metrics.clone(),
    )
    .map_err(context("finding helm"))?;
    let cache = Cache::new(
        args.cache_dir.unwrap_or_else(default_cache_dir),
        chart::DEFAULT_MAX_BYTES,
        Duration::from_secs(args.chart_poll_seconds),
    )
    .map_err(context("opening the chart cache"))?;
    let kube_config = kube::Config::infer()
        .await
        .map_err(context("reading the Kubernetes configuration"))?;
    let client = runtime::client(kube_config, metrics.clone())
        .map_err(context("connecting to Kubernetes"))?;
    let config = definition::Config {
        controller_image: args.controller_image,
        allow_cross_namespace_refs: args.allow_cross_namespace_refs,
        resync: Duration::from_secs(args.resync_seconds),
        concurrency: args.concurrency,
        namespace: args.namespace,
        clusters_namespace: args
            .clusters_namespace
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .unwrap_or_else(|| DEFAULT_CLUSTERS_NAMESPACE.to_string()),
    };
    let election = args.leader_elect.then(|| leader::Settings {
        namespace: args.leader_election_namespace.clone().unwrap_or_default(),
        name: args.leader_election_name.clone(),
        identity: leader::identity(),
        lease: Duration::from_secs(args.leader_election_lease_seconds),
    });
    let shutdown = shutdown();
    let readiness = Readiness::default();
    let server = tokio::spawn(runtime::serve(
        args.metrics_address,
        metrics.clone(),
        readiness.clone(),
        shutdown.clone(),
    ));
    let election = match election {
        Some(settings) => Some(
            Election::start(client.clone(), settings)
                .await
                .map_err(context("starting the leader election"))?,
        ),
        None => None,
    };
    let operator = Arc::new(definition::Context::new(
        client, config, engine, cache, metrics,
    ));
    readiness.set(true);
    tracing::info!(address = %args.metrics_address, "operator started");
    reconcile_while_leading(election, shutdown, |shutdown| {
        definition::run(operator, shutdown)
    })
    .await
    .map_err(|stopped| runtime::error_message(&stopped))?;
    readiness.set(false);
    server
        .await
        .map_err(context("stopping the metrics server"))?
        .map_err(context("serving metrics"))?;
    tracing::info!("operator stopped");
    Ok(())
}

/// Arguments of `compositor post-render`, which Helm runs with the manifest on stdin.
#[derive(Args, Debug)]
pub struct PostRenderArgs {
    /// The controller gate's socket.
    pub socket: PathBuf,
    /// The Helm write's ticket at that gate.
    pub ticket: String,
}

/// `compositor post-render`: passes the manifest on stdin to stdout if the controller's gate
/// allows it, else fails, which stops Helm before it writes anything.
pub fn post_render(args: PostRenderArgs) -> Result<(), CommandError> {
    use std::io::Write;
    let mut manifest = Vec::new();
    // One byte over the cap tells the gate that the manifest is too large.
    std::io::stdin()
        .take(helm::MAX_MANIFEST + 1)
        .read_to_end(&mut manifest)
        .map_err(context("read the manifest"))?;
    let gate = format!("ask the gate at {}", args.socket.display());
    match helm::relay(&args.socket, &args.ticket, &manifest).map_err(context(gate))? {
        Some(allowed) => std::io::stdout()
            .write_all(&allowed)
            .map_err(context("write the manifest")),
        None => Err("the controller did not admit this manifest".into()),
    }
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
    /// The helm binary (default: HELM_BIN, then PATH).
    #[arg(long)]
    pub helm: Option<PathBuf>,
    /// Seconds one helm call may take.
    #[arg(long, env = "COMPOSITOR_HELM_TIMEOUT_SECONDS", default_value_t = 300)]
    pub helm_timeout_seconds: u64,
    /// Address of the metrics and health endpoints.
    #[arg(
        long,
        env = "COMPOSITOR_METRICS_ADDRESS",
        default_value = "0.0.0.0:8080"
    )]
    pub metrics_address: SocketAddr,
    /// Log format.
    #[arg(long, env = "COMPOSITOR_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Debug logging.
    #[arg(long, env = "COMPOSITOR_DEBUG")]
    pub debug: bool,
    /// Reconcile only while holding a Lease, so that several replicas can run: one leads, the
    /// others wait (alive and ready, not reconciling) and take over when it goes.
    #[arg(long, env = "COMPOSITOR_LEADER_ELECT")]
    pub leader_elect: bool,
    /// Namespace of the leader election Lease (default: the definition's namespace, where the
    /// operator grants the controller access to its Lease).
    #[arg(long, env = "POD_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// Name of the leader election Lease (default: `<resource>-<version>-controller`, the name
    /// the operator grants the controller access to).
    #[arg(long)]
    pub leader_election_name: Option<String>,
    /// Seconds a leader's Lease lasts without renewal: the longest a standby waits after its
    /// leader died. The leader renews a third of it before expiry and stops reconciling
    /// (exiting with an error) if it cannot.
    #[arg(
        long,
        env = "COMPOSITOR_LEADER_ELECTION_LEASE_SECONDS",
        default_value_t = 15,
        value_parser = clap::value_parser!(u64).range(MIN_LEASE_SECONDS..),
    )]
    pub leader_election_lease_seconds: u64,
}

/// `compositor controller`: the controller of one definition version.
pub async fn controller(args: ControllerArgs) -> Result<(), CommandError> {
    runtime::init_logging(args.log_format, args.debug);
    runtime::spawn_trimming();
    let metrics = Arc::new(Metrics::default());
    let engine = helm::Engine::locate(
        args.helm,
        Duration::from_secs(args.helm_timeout_seconds),
        metrics.clone(),
    )
    .map_err(context("finding helm"))?;
    let cache_dir = args
        .cache_dir
        .unwrap_or_else(|| std::env::temp_dir().join("compositor-charts"));
    let cache = Cache::open(cache_dir).map_err(context("opening the chart cache"))?;
    let kube_config = kube::Config::infer()
        .await
        .map_err(context("reading the Kubernetes configuration"))?;
    let identity = args.identity;
    let election = args.leader_elect.then(|| leader::Settings {
        namespace: args
            .leader_election_namespace
            .clone()
            .unwrap_or_else(|| identity.definition.namespace.clone()),
        name: args
            .leader_election_name
            .clone()
            .unwrap_or_else(|| identity.name()),
        identity: leader::identity(),
        lease: Duration::from_secs(args.leader_election_lease_seconds),
    });
    let config = composition::Config {
        group: identity.group,
        version: identity.version,
        resource: identity.plural,
        definition_namespace: identity.definition.namespace,
        definition_name: identity.definition.name,
        workers: args.workers,
        resync: Duration::from_secs(args.resync_seconds),
        allow_cross_namespace_refs: identity.allow_cross_namespace_refs,
        clusters_namespace: identity.clusters_namespace,
        remote_uninstall_attempts: args.remote_uninstall_attempts,
    };
    let shutdown = shutdown();
    let readiness = Readiness::default();
    let server = tokio::spawn(runtime::serve(
        args.metrics_address,
        metrics.clone(),
        readiness.clone(),
        shutdown.clone(),
    ));
    let election = match election {
        Some(settings) => {
            let client = runtime::client(kube_config.clone(), metrics.clone())
                .map_err(context("connecting to Kubernetes"))?;
            Some(
                Election::start(client, settings)
                    .await
                    .map_err(context("starting the leader election"))?,
            )
        }
        None => None,
    };
    // Built before leading (it only reads), so that a standby takes over without delay.
    let controller = composition::Context::new(kube_config, config, engine, cache, metrics)
        .await
        .map_err(|error| -> CommandError { format!("starting the controller: {error}").into() })?;
    readiness.set(true);
    tracing::info!(address = %args.metrics_address, "controller started");
    let controller = Arc::new(controller);
    reconcile_while_leading(election, shutdown, |shutdown| {
        composition::run(controller, shutdown)
    })
    .await
    .map_err(|stopped| runtime::error_message(&stopped))?;
    readiness.set(false);
    server
        .await
        .map_err(context("stopping the metrics server"))?
        .map_err(context("serving metrics"))?;
    tracing::info!("controller stopped");
    Ok(())
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
        };
        let parsed = Controller::try_parse_from(identity.args()).unwrap().args;
        assert_eq!(parsed.identity, identity);
        assert_eq!(parsed.workers, 4, "the rest keep their defaults");
    }
}
