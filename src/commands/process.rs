//! What the two roles share as processes: the flags for Helm, logging, the metrics and health
//! server and leader election, and starting and stopping around their reconciles.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use tokio::task::JoinHandle;

use super::{CommandError, context};
use crate::helm;
use crate::runtime::leader::{self, Election, MIN_LEASE_SECONDS};
use crate::runtime::{
    self, LogFormat, Metrics, Readiness, Shutdown, reconcile_while_leading, shutdown,
};

/// Flags of both roles (`compositor run` and `compositor controller`).
#[derive(Args, Debug)]
pub struct ProcessArgs {
    /// The helm binary, run once per call; when given, it is used rather than the resident
    /// engine (default, without an engine: HELM_BIN, then PATH). A template's `lookup` is then
    /// Helm's own, which reads whatever the release identity may read; the engine's sees only
    /// the release's own objects.
    #[arg(long)]
    pub helm: Option<PathBuf>,
    /// The resident Helm engine (`helm-engine`), which serves calls without a process each and
    /// stops when idle; used unless `--helm` is given.
    #[arg(long, env = "HELM_ENGINE")]
    pub helm_engine: Option<PathBuf>,
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

/// A role's process once started. Its health and metrics server answers from the start, so
/// that probes see a live process while the role gets ready.
pub(super) struct Process {
    /// The process's metrics, which the server serves.
    pub metrics: Arc<Metrics>,
    /// How Helm is run.
    pub engine: helm::Engine,
    /// How the management cluster is reached.
    pub kube_config: kube::Config,
    args: ProcessArgs,
    shutdown: Shutdown,
    readiness: Readiness,
    server: JoinHandle<std::io::Result<()>>,
}

impl ProcessArgs {
    /// Starts logging, Helm and the health and metrics server, and reads the Kubernetes
    /// configuration.
    pub(super) async fn start(self) -> Result<Process, CommandError> {
        runtime::init_logging(self.log_format, self.debug);
        runtime::spawn_trimming();
        let metrics = Arc::new(Metrics::default());
        let timeout = Duration::from_secs(self.helm_timeout_seconds);
        // `--helm` is a choice made for this process; the engine may come from the image.
        let engine = match (self.helm.clone(), self.helm_engine.clone()) {
            (None, Some(helm_engine)) => {
                helm::Engine::resident(helm_engine, timeout, metrics.clone())
            }
            (helm, _) => helm::Engine::locate(helm, timeout, metrics.clone())
                .map_err(context("finding helm"))?,
        };
        let kube_config = kube::Config::infer()
            .await
            .map_err(context("reading the Kubernetes configuration"))?;
        let shutdown = shutdown();
        let readiness = Readiness::default();
        let server = tokio::spawn(runtime::serve(
            self.metrics_address,
            metrics.clone(),
            readiness.clone(),
            shutdown.clone(),
        ));
        Ok(Process {
            metrics,
            engine,
            kube_config,
            args: self,
            shutdown,
            readiness,
            server,
        })
    }
}

impl Process {
    /// A client of the management cluster that counts its requests in the metrics.
    pub(super) fn client(&self) -> Result<kube::Client, CommandError> {
        runtime::client(self.kube_config.clone(), self.metrics.clone())
            .map_err(context("connecting to Kubernetes"))
    }

    /// The leader election on Lease `namespace`/`name` through `client`, when the flags ask
    /// for one.
    pub(super) async fn elect(
        &self,
        client: kube::Client,
        namespace: String,
        name: String,
    ) -> Result<Option<Election>, CommandError> {
        if !self.args.leader_elect {
            return Ok(None);
        }
        let settings = leader::Settings {
            namespace,
            name,
            identity: leader::identity(),
            lease: Duration::from_secs(self.args.leader_election_lease_seconds),
        };
        Election::start(client, settings)
            .await
            .map(Some)
            .map_err(context("starting the leader election"))
    }

    /// Marks the process ready and runs `reconcile` while leading (always, without an
    /// election) until a signal; then waits for the server to stop.
    pub(super) async fn serve<F>(
        self,
        role: &str,
        election: Option<Election>,
        reconcile: impl FnOnce(Shutdown) -> F,
    ) -> Result<(), CommandError>
    where
        F: Future<Output = ()>,
    {
        self.readiness.set(true);
        tracing::info!(address = %self.args.metrics_address, "{role} started");
        reconcile_while_leading(election, self.shutdown, reconcile)
            .await
            .map_err(|stopped| runtime::error_message(&stopped))?;
        self.readiness.set(false);
        self.server
            .await
            .map_err(context("stopping the metrics server"))?
            .map_err(context("serving metrics"))?;
        tracing::info!("{role} stopped");
        Ok(())
    }
}
