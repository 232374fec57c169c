//! The private state of one Helm call: its directory and its command line.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{Error, KubeContext, PostRenderer, post_render};

/// A private directory (mode 0700) holding one call's values, kubeconfig and Helm state.
///
/// Removing it means unlinking what Helm wrote there besides (its discovery and OpenAPI caches,
/// some hundred files), which takes tens of milliseconds on a busy disk: within a Tokio runtime
/// that is done on its blocking threads, so that a call returns as soon as Helm has answered and
/// no worker thread waits on the disk.
pub(super) struct Workspace {
    path: PathBuf,
    /// `None` once handed over for removal.
    dir: Option<tempfile::TempDir>,
}

impl Workspace {
    pub(super) fn new(verb: &'static str) -> Result<Self, Error> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("compositor-helm-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .map_err(|source| Error::Spawn { verb, source })?;
        Ok(Workspace {
            path: dir.path().to_path_buf(),
            dir: Some(dir),
        })
    }

    /// The directory.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// A workspace holding the target's kubeconfig, where helm's `KUBECONFIG` points.
    pub(super) fn for_context(verb: &'static str, target: &KubeContext) -> Result<Self, Error> {
        let workspace = Workspace::new(verb)?;
        workspace.write("kubeconfig", &target.kubeconfig)?;
        Ok(workspace)
    }

    /// Writes a file readable by the owner only; `name` may have folders, which are made
    /// private too.
    pub(super) fn write(&self, name: &str, content: &[u8]) -> Result<PathBuf, Error> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let path = self.path.join(name);
        if let Some(folder) = path.parent() {
            let mut folders = std::fs::DirBuilder::new();
            folders.recursive(true).mode(0o700);
            folders.create(folder).map_err(|source| Error::Spawn {
                verb: "write",
                source,
            })?;
        }
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut file| file.write_all(content).map(|()| file))
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

impl Drop for Workspace {
    fn drop(&mut self) {
        let Some(dir) = self.dir.take() else {
            return;
        };
        // A runtime shutting down drops the task unrun, and with it `dir`: removed all the same.
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(move || drop(dir))),
            Err(_) => drop(dir),
        }
    }
}

/// Where a workspace keeps Helm's plugins (`HELM_PLUGINS`).
pub(super) const PLUGINS: &str = "plugins";

/// Makes Helm run `renderer` on the rendered manifest: Helm 4 runs post-renderers as plugins
/// (one is written into the workspace), Helm 3 runs the executable itself.
pub(super) fn post_renderer_args(
    workspace: &Workspace,
    args: &mut Args,
    renderer: &PostRenderer,
    helm_4: bool,
) -> Result<(), Error> {
    if helm_4 {
        let plugin = format!("{PLUGINS}/{}/plugin.yaml", post_render::PLUGIN);
        workspace.write(&plugin, post_render::plugin_manifest(renderer).as_bytes())?;
        args.flag("--post-renderer", post_render::PLUGIN);
    } else {
        args.flag("--post-renderer", &renderer.command);
    }
    for arg in &renderer.args {
        args.flag("--post-renderer-args", arg);
    }
    Ok(())
}

/// A helm command line.
pub(super) struct Args(pub(super) Vec<OsString>);

impl Args {
    pub(super) fn new(words: &[&str]) -> Self {
        Args(words.iter().map(Into::into).collect())
    }

    pub(super) fn push(&mut self, arg: impl AsRef<OsStr>) -> &mut Self {
        self.0.push(arg.as_ref().to_os_string());
        self
    }

    pub(super) fn flag(&mut self, name: &str, value: impl AsRef<OsStr>) -> &mut Self {
        self.push(name).push(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_workspace_and_its_folders_and_files_are_its_owners_alone() {
        let workspace = Workspace::new("test").unwrap();
        let file = workspace
            .write("plugins/renderer/plugin.yaml", b"x")
            .unwrap();
        let mode =
            |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(workspace.path()), 0o700);
        assert_eq!(mode(&workspace.path().join("plugins")), 0o700);
        assert_eq!(mode(&workspace.path().join("plugins/renderer")), 0o700);
        assert_eq!(mode(&file), 0o600);
    }

    /// A workspace with a file in a folder, as Helm leaves one; its path.
    fn used_workspace() -> (Workspace, PathBuf) {
        let workspace = Workspace::new("test").unwrap();
        workspace.write(".kube/cache/http/document", b"{}").unwrap();
        let path = workspace.path().to_path_buf();
        (workspace, path)
    }

    #[test]
    fn outside_a_runtime_a_dropped_workspace_is_removed_at_once() {
        let (workspace, path) = used_workspace();
        drop(workspace);
        assert!(!path.exists());
    }

    #[tokio::test]
    async fn within_a_runtime_a_dropped_workspace_is_removed_on_a_blocking_thread() {
        let (workspace, path) = used_workspace();
        drop(workspace);
        for _ in 0..500 {
            if !path.exists() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("{} is still there after 5 s", path.display());
    }
}
