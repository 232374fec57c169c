//! The Helm engine: every call to the `helm` CLI goes through here.
//!
//! compositor downloads and verifies charts itself and hands Helm a local `.tgz`, a values file
//! and, for calls that touch a cluster, a kubeconfig file — all in a private temporary directory
//! with mode 0600 — so Helm never sees a credential on its command line and never needs the
//! network. Every call has a timeout, and its stderr becomes a short error message.

mod manifest;

pub use manifest::{ManifestError, RenderedObject, parse_manifest};

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;

use crate::runtime::{HelmOutcome, Metrics};

/// Longest part of Helm's stderr kept in an error message.
const MESSAGE_LIMIT: usize = 1024;

/// A failed Helm call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No `helm` binary could be found.
    #[error("helm not found: pass --helm, set HELM_BIN, or put helm on PATH")]
    NotFound,
    /// The call could not be started or its files written.
    #[error("cannot run helm {verb}")]
    Spawn {
        /// The helm subcommand.
        verb: &'static str,
        /// What went wrong.
        #[source]
        source: std::io::Error,
    },
    /// The call ran longer than the engine's timeout and was killed.
    #[error("helm {verb} timed out after {timeout:?}")]
    Timeout {
        /// The helm subcommand.
        verb: &'static str,
        /// The limit.
        timeout: Duration,
    },
    /// Helm exited non-zero; `message` is its stderr, shortened.
    #[error("helm {verb} failed: {message}")]
    Failed {
        /// The helm subcommand.
        verb: &'static str,
        /// Helm's own words.
        message: String,
    },
}

impl Error {
    /// A reason for a Kubernetes condition.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::NotFound | Error::Spawn { .. } => "HelmUnavailable",
            Error::Timeout { .. } => "HelmTimeout",
            Error::Failed { .. } => "HelmFailed",
        }
    }
}

/// Runs `helm` with private state for each call, counting every call in the metrics.
#[derive(Clone)]
pub struct Engine {
    binary: PathBuf,
    timeout: Duration,
    metrics: Arc<Metrics>,
}

impl Engine {
    /// Finds helm: `explicit` (the `--helm` flag), else `HELM_BIN`, else `helm` on `PATH`.
    pub fn locate(
        explicit: Option<PathBuf>,
        timeout: Duration,
        metrics: Arc<Metrics>,
    ) -> Result<Self, Error> {
        let binary = explicit
            .or_else(|| std::env::var_os("HELM_BIN").map(PathBuf::from))
            .or_else(|| find_on_path("helm"))
            .ok_or(Error::NotFound)?;
        Ok(Engine {
            binary,
            timeout,
            metrics,
        })
    }

    /// `helm version --short`.
    pub async fn version(&self) -> Result<String, Error> {
        let workspace = Workspace::new("version")?;
        let args: [&OsStr; 2] = ["version".as_ref(), "--short".as_ref()];
        let out = self.run("version", &workspace, &args).await?;
        Ok(out.trim().to_string())
    }

    /// Renders `chart` (a local `.tgz`) with `values` as release `release` in `namespace`,
    /// without contacting any cluster. Returns the manifest.
    pub async fn template(
        &self,
        chart: &Path,
        release: &str,
        namespace: &str,
        values: &Value,
    ) -> Result<String, Error> {
        let workspace = Workspace::new("template")?;
        let values_file = workspace.write("values.json", &values.to_string())?;
        let args: [&OsStr; 7] = [
            "template".as_ref(),
            release.as_ref(),
            chart.as_os_str(),
            "--namespace".as_ref(),
            namespace.as_ref(),
            "--values".as_ref(),
            values_file.as_os_str(),
        ];
        self.run("template", &workspace, &args).await
    }

    async fn run(
        &self,
        verb: &'static str,
        workspace: &Workspace,
        args: &[&OsStr],
    ) -> Result<String, Error> {
        let result = self.call(verb, workspace, args).await;
        let outcome = if result.is_ok() {
            HelmOutcome::Success
        } else {
            HelmOutcome::Failure
        };
        self.metrics.helm_call(verb, outcome);
        result
    }

    async fn call(
        &self,
        verb: &'static str,
        workspace: &Workspace,
        args: &[&OsStr],
    ) -> Result<String, Error> {
        let home = workspace.dir.path();
        let mut command = Command::new(&self.binary);
        command
            .args(args)
            .env_clear()
            .env("HOME", home)
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_DATA_HOME", home.join("data"))
            .env("KUBECONFIG", home.join("kubeconfig"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let child = command
            .spawn()
            .map_err(|source| Error::Spawn { verb, source })?;
        let output = tokio::time::timeout(self.timeout, child.wait_with_output())
            .await
            .map_err(|_| Error::Timeout {
                verb,
                timeout: self.timeout,
            })?
            .map_err(|source| Error::Spawn { verb, source })?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(Error::Failed {
                verb,
                message: shorten(&String::from_utf8_lossy(&output.stderr)),
            })
        }
    }
}

/// A private directory (mode 0700) holding one call's values, kubeconfig and Helm state.
struct Workspace {
    dir: tempfile::TempDir,
}

impl Workspace {
    fn new(verb: &'static str) -> Result<Self, Error> {
        let dir = tempfile::Builder::new()
            .prefix("compositor-helm-")
            .tempdir()
            .map_err(|source| Error::Spawn { verb, source })?;
        Ok(Workspace { dir })
    }

    /// Writes a file readable by the owner only.
    fn write(&self, name: &str, content: &str) -> Result<PathBuf, Error> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.dir.path().join(name);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut file| file.write_all(content.as_bytes()).map(|()| file))
            .map_err(|source| Error::Spawn {
                verb: "write",
                source,
            })?;
        file.flush().map_err(|source| Error::Spawn {
            verb: "write",
            source,
        })?;
        Ok(path)
    }
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

/// Helm's stderr without its `Error: ` prefix, cut to [`MESSAGE_LIMIT`] bytes on a char boundary.
fn shorten(stderr: &str) -> String {
    let message = stderr.trim().trim_start_matches("Error: ").trim();
    if message.len() <= MESSAGE_LIMIT {
        return message.to_string();
    }
    let mut end = MESSAGE_LIMIT;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_lose_the_prefix_and_stay_short() {
        assert_eq!(shorten("Error: chart not found\n"), "chart not found");
        let long = "é".repeat(MESSAGE_LIMIT);
        let short = shorten(&long);
        assert!(short.len() <= MESSAGE_LIMIT + '…'.len_utf8());
        assert!(short.ends_with('…'));
    }
}
