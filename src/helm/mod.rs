//! The Helm engine: every Helm call goes through here, run by Helm's own command line, either in
//! a resident `helm-engine` process that serves call after call ([`Engine::resident`], see
//! `resident.rs`) or in a `helm` process of its own ([`Engine::locate`]), with the same arguments
//! and environment either way. The calls on a release, each with its flags, are in `calls.rs`.
//!
//! compositor downloads and verifies charts itself and hands Helm a local `.tgz`, a values file
//! and, for calls that touch a cluster, a kubeconfig file — all in a private temporary directory
//! with mode 0600 — so Helm never sees a credential on its command line and never needs the
//! network. Every call has a timeout, and its stderr becomes a short error message.
//!
//! Releases are never made with `--atomic` (or Helm 4's `--rollback-on-failure`): the controller
//! reads the release state and recovers itself. Every install and upgrade passes the complete
//! values with `--reset-values`, so an empty `spec` does not silently keep the previous values.
//!
//! Helm 4 applies objects server-side by default. Kubernetes before 1.22 rejects server-side
//! apply of lists keyed by a field the object omits (a container port or Service port without
//! `protocol`: "associative list with keys has an element that omits key field"), so an engine
//! for such clusters is built with [`Engine::with_server_side`]`(false)`.
//!
//! With server-side apply an install or upgrade skips Helm's own OpenAPI validation
//! (`--disable-openapi-validation`), more than half of an install's CPU: Helm fetches and parses
//! the server's OpenAPI documents on every call to check what the server checks anyway. The
//! server builds each applied object against its schema and refuses an unknown field, a wrong
//! type or an unknown kind with the same message either way, before that object is written.
//!
//! Each helm process is counted under its subcommand (`upgrade`, `rollback`, `uninstall`,
//! `history`, and `get metadata` plus `get manifest` for [`Engine::status`]); "release: not
//! found" is an answer, counted as a success. [`Engine::status`] needs Helm 3.13 or later; the
//! other calls work with Helm 3.8 and later. Helm runs with an empty environment, so a
//! kubeconfig must carry its credentials (token or client certificate), not an `exec` plugin.

mod calls;
mod error;
mod exit;
mod limits;
mod manifest;
mod post_render;
mod process;
mod release;
mod resident;
mod storage;
mod usage;
mod workspace;

pub use error::Error;
pub use manifest::{
    ManifestError, RELEASE_NAME_ANNOTATION, RELEASE_NAMESPACE_ANNOTATION, RenderedDocument,
    RenderedObject, parse_documents, parse_manifest, release_of,
};
pub use post_render::{
    Gate, MAX_MANIFEST, ManifestTooLarge, PostRenderer, Request, SUBCOMMAND as POST_RENDER, Ticket,
    relay,
};
pub use release::{Release, ReleaseStatus, Revision};
pub use storage::{Record, RecordError, latest_record, recorded_manifest};

use error::shorten;
use workspace::{PLUGINS, Workspace};

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use limits::{
    ADDRESS_SPACE_LIMIT, CALL_CPU_LIMIT, ENGINE_CALL_HEAP, ENGINE_DATA_LIMIT, ENGINE_IDLE,
    ENGINE_RECYCLE_DATA, ENGINE_RETAINED_HEAP, ENGINES, GO_RUNTIME,
};
use resident::Resident;

use crate::runtime::{HelmOutcome, Metrics};

/// The cluster and namespace a call talks to.
///
/// The kubeconfig is the caller's, complete with credentials; it is only ever written to the
/// call's private directory (mode 0600) and named to helm by path, never passed in an argument
/// or an environment variable. `Debug` does not print it.
#[derive(Clone)]
pub struct KubeContext {
    kubeconfig: Vec<u8>,
    namespace: String,
}

impl KubeContext {
    /// A context from a kubeconfig's content (its current context is used) and a namespace.
    pub fn new(kubeconfig: impl Into<Vec<u8>>, namespace: impl Into<String>) -> Self {
        KubeContext {
            kubeconfig: kubeconfig.into(),
            namespace: namespace.into(),
        }
    }

    /// The namespace of the release.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }
}

impl std::fmt::Debug for KubeContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeContext")
            .field("kubeconfig", &"<redacted>")
            .field("namespace", &self.namespace)
            .finish()
    }
}

/// How [`Engine::upgrade_install`] runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UpgradeOptions {
    /// Create the target namespace if it does not exist.
    pub create_namespace: bool,
    /// Wait until the release's objects are ready (within the engine's timeout) before returning.
    pub wait: bool,
    /// Run the rendered manifest through this before anything is written (a [`Gate`]'s);
    /// needs Helm 3.10 or later.
    pub post_renderer: Option<PostRenderer>,
    /// Labels of the release, kept on each of Helm's records of it (`--labels`, Helm 3.13 or
    /// later): keys and values must be label-safe, they are passed as they are.
    pub labels: std::collections::BTreeMap<String, String>,
}

/// Runs Helm calls with private state for each, counting every call in the metrics.
#[derive(Clone)]
pub struct Engine {
    runner: Runner,
    timeout: Duration,
    metrics: Arc<Metrics>,
    server_side: bool,
    /// Whether this helm knows `--server-side` (Helm 4), learned from its version once.
    knows_server_side: Arc<OnceLock<bool>>,
}

/// What runs a call.
#[derive(Clone)]
enum Runner {
    /// A `helm` process per call.
    Process(PathBuf),
    /// Resident `helm-engine`s ([`ENGINES`]), each serving one call after another.
    Resident(Arc<Resident>),
}

/// What a call left: whether it succeeded, and what it printed.
struct Output {
    success: bool,
    stdout: String,
    stderr: String,
}

impl Engine {
    /// Finds helm: `explicit` (the `--helm` flag), else `HELM_BIN`, else `helm` on `PATH`; each
    /// call is a `helm` process.
    pub fn locate(
        explicit: Option<PathBuf>,
        timeout: Duration,
        metrics: Arc<Metrics>,
    ) -> Result<Self, Error> {
        let binary = explicit
            .or_else(|| std::env::var_os("HELM_BIN").map(PathBuf::from))
            .or_else(|| process::find_on_path("helm"))
            .ok_or(Error::NotFound)?;
        Ok(Engine::with_runner(
            Runner::Process(binary),
            timeout,
            metrics,
        ))
    }

    /// Calls served by the resident engine `helm_engine` (see `helm-engine/`), started with the
    /// first call and stopped when idle.
    pub fn resident(helm_engine: PathBuf, timeout: Duration, metrics: Arc<Metrics>) -> Self {
        let limits = resident::Limits {
            cpu: CALL_CPU_LIMIT,
            heap: ENGINE_CALL_HEAP,
            data: ENGINE_DATA_LIMIT,
            recycle_at: ENGINE_RECYCLE_DATA,
            retained: ENGINE_RETAINED_HEAP,
        };
        let resident = Resident::new(helm_engine, ENGINES, ENGINE_IDLE, limits);
        Engine::with_runner(Runner::Resident(resident), timeout, metrics)
    }

    fn with_runner(runner: Runner, timeout: Duration, metrics: Arc<Metrics>) -> Self {
        Engine {
            runner,
            timeout,
            metrics,
            server_side: true,
            knows_server_side: Arc::new(OnceLock::new()),
        }
    }

    /// Whether installs, upgrades and rollbacks apply objects server-side (the default, and
    /// Helm 4's). Clusters older than Kubernetes 1.22 need `false`; see the module docs. Helm 3
    /// always applies client-side and ignores this.
    pub fn with_server_side(mut self, server_side: bool) -> Self {
        self.server_side = server_side;
        self
    }

    /// `helm version --short`.
    pub async fn version(&self) -> Result<String, Error> {
        let workspace = Workspace::new("version")?;
        let args: [&OsStr; 2] = ["version".as_ref(), "--short".as_ref()];
        let out = self.run("version", &workspace, &args).await?;
        let version = out.trim().to_string();
        let _ = self
            .knows_server_side
            .set(calls::knows_server_side(&version));
        Ok(version)
    }

    async fn run<S: AsRef<OsStr>>(
        &self,
        verb: &'static str,
        workspace: &Workspace,
        args: &[S],
    ) -> Result<String, Error> {
        let result = self.call(verb, workspace, args).await;
        // A missing release is an answer, not a failed call.
        let outcome = match &result {
            Ok(_) => HelmOutcome::Success,
            Err(error) if error.is_release_not_found() => HelmOutcome::Success,
            Err(_) => HelmOutcome::Failure,
        };
        self.metrics.helm_call(verb, outcome);
        result
    }

    async fn call<S: AsRef<OsStr>>(
        &self,
        verb: &'static str,
        workspace: &Workspace,
        args: &[S],
    ) -> Result<String, Error> {
        let home = workspace.path();
        let env: [(&'static str, OsString); 6] = [
            ("HOME", home.into()),
            ("HELM_CONFIG_HOME", home.join("config").into()),
            ("HELM_CACHE_HOME", home.join("cache").into()),
            ("HELM_DATA_HOME", home.join("data").into()),
            ("HELM_PLUGINS", home.join(PLUGINS).into()),
            ("KUBECONFIG", home.join("kubeconfig").into()),
        ];
        let args: Vec<OsString> = args.iter().map(|arg| arg.as_ref().into()).collect();
        let output = match &self.runner {
            Runner::Process(binary) => {
                let go = GO_RUNTIME.map(|(name, value)| (name, value.into()));
                let env = [&env[..], &go[..]].concat();
                process::run(binary, verb, &args, &env, self.timeout).await?
            }
            Runner::Resident(resident) => {
                let share = namespace_of(&args).unwrap_or_default();
                resident.run(verb, &args, &env, share, self.timeout).await?
            }
        };
        if output.success {
            Ok(output.stdout)
        } else if error::ran_out_of_memory(&output.stderr) {
            // A helm process's; a resident engine that runs out ends, which `resident` tells.
            let limit_mib = ADDRESS_SPACE_LIMIT >> 20;
            Err(Error::OutOfMemory { verb, limit_mib })
        } else {
            Err(Error::Failed {
                verb,
                message: shorten(&output.stderr),
            })
        }
    }
}

/// The namespace a call names (`--namespace`), which engines are shared out by.
fn namespace_of(args: &[OsString]) -> Option<&str> {
    let at = args.iter().position(|arg| arg == "--namespace")?;
    args.get(at + 1)?.to_str()
}

#[cfg(test)]
mod tests;
