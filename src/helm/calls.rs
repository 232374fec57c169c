//! The engine's calls on a release: render, install or upgrade, read, roll back and uninstall,
//! each with its flags, its private workspace and its answer read back.

use std::ffi::OsStr;
use std::path::Path;

use serde_json::Value;

use super::workspace::{Args, Workspace, post_renderer_args};
use super::{Engine, Error, KubeContext, Release, Revision, UpgradeOptions, release};

/// Revisions Helm keeps per release; older ones are pruned.
const HISTORY_MAX: &str = "10";

impl Engine {
    /// Renders `chart` (a local `.tgz`) with `values` as release `release` in `namespace`,
    /// without contacting any cluster. Returns the manifest: templates, hooks and the chart's
    /// `crds/`, everything an install writes.
    pub async fn template(
        &self,
        chart: &Path,
        release: &str,
        namespace: &str,
        values: &Value,
    ) -> Result<String, Error> {
        let workspace = Workspace::new("template")?;
        let values_file = workspace.write("values.json", values.to_string().as_bytes())?;
        let args: [&OsStr; 8] = [
            "template".as_ref(),
            "--include-crds".as_ref(),
            release.as_ref(),
            chart.as_os_str(),
            "--namespace".as_ref(),
            namespace.as_ref(),
            "--values".as_ref(),
            values_file.as_os_str(),
        ];
        self.run("template", &workspace, &args).await
    }

    /// `helm upgrade --install`: installs `chart` (a local `.tgz`) as `release` in the target's
    /// namespace with exactly `values`, or upgrades the release to it. Returns the new revision.
    ///
    /// A failed install or upgrade is left as Helm records it (`failed`); nothing is rolled back.
    pub async fn upgrade_install(
        &self,
        target: &KubeContext,
        release: &str,
        chart: &Path,
        values: &Value,
        options: UpgradeOptions,
    ) -> Result<Release, Error> {
        const VERB: &str = "upgrade";
        let workspace = Workspace::for_context(VERB, target)?;
        let values_file = workspace.write("values.json", values.to_string().as_bytes())?;
        let mut args = Args::new(&["upgrade", "--install"]);
        args.flag("--namespace", &target.namespace)
            .flag("--values", values_file.as_os_str())
            .push("--reset-values")
            .flag("--history-max", HISTORY_MAX)
            .flag("--timeout", self.helm_timeout())
            .flag("--output", "json");
        if options.create_namespace {
            args.push("--create-namespace");
        }
        if options.wait {
            args.push("--wait");
        }
        if !options.labels.is_empty() {
            let labels: Vec<String> = options
                .labels
                .iter()
                .map(|(key, value)| format!("{key}={value}"))
                .collect();
            args.flag("--labels", labels.join(","));
        }
        let helm_4 = self.server_side_arg(&mut args).await?;
        if helm_4 && self.server_side {
            args.push("--disable-openapi-validation");
        }
        if let Some(renderer) = &options.post_renderer {
            post_renderer_args(&workspace, &mut args, renderer, helm_4)?;
        }
        args.push("--").push(release).push(chart.as_os_str());
        let out = self.run(VERB, &workspace, &args.0).await?;
        release::parse_release(&out).map_err(|source| Error::Output { verb: VERB, source })
    }

    /// The latest revision of `release`, or `None` when there is no such release.
    ///
    /// Reads only Helm's release records (`helm get metadata` and `helm get manifest`, Helm 3.13+
    /// or 4), not the live objects, so it works whatever state those are in.
    pub async fn status(
        &self,
        target: &KubeContext,
        release: &str,
    ) -> Result<Option<Release>, Error> {
        const METADATA: &str = "get metadata";
        const MANIFEST: &str = "get manifest";
        let workspace = Workspace::for_context(METADATA, target)?;
        let mut args = Args::new(&["get", "metadata"]);
        args.flag("--namespace", &target.namespace)
            .flag("--output", "json")
            .push("--")
            .push(release);
        let metadata = match self.run(METADATA, &workspace, &args.0).await {
            Err(error) if error.is_release_not_found() => return Ok(None),
            out => release::parse_metadata(&out?).map_err(|source| Error::Output {
                verb: METADATA,
                source,
            })?,
        };
        let mut args = Args::new(&["get", "manifest"]);
        args.flag("--namespace", &target.namespace)
            .flag("--revision", metadata.revision().to_string())
            .push("--")
            .push(release);
        match self.run(MANIFEST, &workspace, &args.0).await {
            // Uninstalled between the two calls.
            Err(error) if error.is_release_not_found() => Ok(None),
            // `get manifest` prints the stored manifest plus a newline of its own.
            manifest => {
                let mut manifest = manifest?;
                if manifest.ends_with('\n') {
                    manifest.pop();
                }
                Ok(Some(metadata.into_release(manifest)))
            }
        }
    }

    /// Every revision Helm keeps of `release`, oldest first; empty when there is no such release.
    pub async fn history(
        &self,
        target: &KubeContext,
        release: &str,
    ) -> Result<Vec<Revision>, Error> {
        const VERB: &str = "history";
        let workspace = Workspace::for_context(VERB, target)?;
        let mut args = Args::new(&["history"]);
        args.flag("--namespace", &target.namespace)
            .flag("--output", "json")
            .push("--")
            .push(release);
        match self.run(VERB, &workspace, &args.0).await {
            Err(error) if error.is_release_not_found() => Ok(Vec::new()),
            out => {
                release::parse_history(&out?).map_err(|source| Error::Output { verb: VERB, source })
            }
        }
    }

    /// `helm rollback`: makes a new revision from `revision`'s chart and values. This is also
    /// how a release stuck in a pending state is recovered.
    pub async fn rollback(
        &self,
        target: &KubeContext,
        release: &str,
        revision: u64,
    ) -> Result<(), Error> {
        const VERB: &str = "rollback";
        let workspace = Workspace::for_context(VERB, target)?;
        let mut args = Args::new(&["rollback"]);
        args.flag("--namespace", &target.namespace)
            .flag("--history-max", HISTORY_MAX)
            .flag("--timeout", self.helm_timeout());
        self.server_side_arg(&mut args).await?;
        args.push("--").push(release).push(revision.to_string());
        self.run(VERB, &workspace, &args.0).await.map(drop)
    }

    /// `helm uninstall`: deletes the release's objects and records. Returns whether the release
    /// existed; uninstalling a release that does not is not an error.
    pub async fn uninstall(&self, target: &KubeContext, release: &str) -> Result<bool, Error> {
        const VERB: &str = "uninstall";
        let workspace = Workspace::for_context(VERB, target)?;
        let mut args = Args::new(&["uninstall"]);
        args.flag("--namespace", &target.namespace)
            .flag("--timeout", self.helm_timeout())
            .push("--")
            .push(release);
        match self.run(VERB, &workspace, &args.0).await {
            Ok(_) => Ok(true),
            Err(error) if error.is_release_not_found() => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Helm's own `--timeout`, a tenth shorter than the engine's, so that Helm gives up (and
    /// records the release as failed) before the engine kills it mid-operation.
    pub(super) fn helm_timeout(&self) -> String {
        format!("{}ms", (self.timeout / 10 * 9).as_millis())
    }

    /// Adds `--server-side=<bool>` when this helm has the flag (Helm 4); Helm 3 rejects it.
    /// Whether it has.
    async fn server_side_arg(&self, args: &mut Args) -> Result<bool, Error> {
        let knows = match self.knows_server_side.get() {
            Some(knows) => *knows,
            None => {
                let knows = knows_server_side(&self.version().await?);
                *self.knows_server_side.get_or_init(|| knows)
            }
        };
        if knows {
            args.push(format!("--server-side={}", self.server_side));
        }
        Ok(knows)
    }
}

/// Whether a `helm version --short` (`v4.3.1+gc0d08d0`) is Helm 4 or later, which has
/// `--server-side`. An unreadable version is taken to be a newer one.
pub(super) fn knows_server_side(version: &str) -> bool {
    version
        .trim()
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|major| major.parse::<u64>().ok())
        .is_none_or(|major| major >= 4)
}
