//! What both roles share at run time: logging, metrics, the Kubernetes client, leader
//! election, a fair share of the workers, the health and metrics server, and shutdown on a
//! signal.

mod allocator;
mod client;
pub mod events;
mod fair;
pub mod leader;
mod lifecycle;
mod metrics;
#[cfg(test)]
pub mod mock_api;
mod phases;
mod reconciler;
mod text;

pub use allocator::{spawn_trimming, tune_allocator};
pub use client::{
    ApiAction, NO_RESPONSE, WATCHES_PER_CONNECTION, client, cluster_client, watch_client,
};
pub use fair::{FairGate, Permit};
pub use lifecycle::{Shutdown, Stopped, reconcile_while_leading, shutdown};
pub use metrics::{Counted, HelmOutcome, Metrics, ReconcileOutcome};
pub use phases::definition_phase;
pub use reconciler::{ReconcileError, drain, finalized, log_failure, timed};
pub use text::error_message;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kube::runtime::utils::{Backoff, ResetTimerBackoff};
use kube::runtime::watcher::ExponentialBackoff;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

/// The backoff of every watch. A CRD gaining or losing a version ends the watches on it, and
/// the re-list that follows should come within a tenth of a second rather than after kube's
/// default 0.8 s, since a version move waits on it; a failing apiserver still gets
/// exponentially fewer attempts, down to one every 30 s.
pub fn watch_backoff() -> impl Backoff {
    let attempts = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(30))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times();
    ResetTimerBackoff::new(ExponentialBackoff::from(attempts), Duration::from_secs(120))
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Sets up `tracing`: `RUST_LOG` if set, else `info` (`debug` with `debug`) for compositor.
pub fn init_logging(format: LogFormat, debug: bool) {
    let default = if debug {
        "compositor=debug,info"
    } else {
        "info"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

/// Installs the process-wide TLS crypto provider (ring); call once at start.
pub fn init_tls() {
    // Fails only when a provider is already installed, which is what we want anyway.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Whether the process is ready to serve; `/readyz` answers 200 only when set.
#[derive(Clone, Debug, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// Marks the process ready (or not).
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Relaxed);
    }

    fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

#[derive(Clone)]
struct ServerState {
    metrics: Arc<Metrics>,
    readiness: Readiness,
}

/// Serves `/metrics` (Prometheus text), `/healthz` and `/readyz` on `address` until `shutdown`.
pub async fn serve(
    address: SocketAddr,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .with_state(ServerState { metrics, readiness });
    let listener = tokio::net::TcpListener::bind(address).await?;
    tracing::info!(address = %listener.local_addr()?, "serving metrics and health");
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

async fn metrics_text(State(state): State<ServerState>) -> (StatusCode, String) {
    match state.metrics.encode() {
        Ok(text) => (StatusCode::OK, text),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, String::new()),
    }
}

async fn ready(State(state): State<ServerState>) -> (StatusCode, &'static str) {
    if state.readiness.get() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        () = terminate => {},
    }
}
