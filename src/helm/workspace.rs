//! The private state of one Helm call: its directory and its command line.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::path::PathBuf;

use super::{Error, PostRenderer, Target, post_render};

/// A private directory (mode 0700) holding one call's values, kubeconfig and Helm state.
pub(super) struct Workspace {
    pub(super) dir: tempfile::TempDir,
}

impl Workspace {
    pub(super) fn new(verb: &'static str) -> Result<Self, Error> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("compositor-helm-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .map_err(|source| Error::Spawn { verb, source })?;
        Ok(Workspace { dir })
    }

    /// A workspace holding the target's kubeconfig, where helm's `KUBECONFIG` points.
    pub(super) fn for_target(verb: &'static str, target: &Target) -> Result<Self, Error> {
        let workspace = Workspace::new(verb)?;
        workspace.write("kubeconfig", &target.kubeconfig)?;
        Ok(workspace)
    }

    /// Writes a file readable by the owner only; `name` may have folders, which are made
    /// private too.
    pub(super) fn write(&self, name: &str, content: &[u8]) -> Result<PathBuf, Error> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let path = self.dir.path().join(name);
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
        assert_eq!(mode(workspace.dir.path()), 0o700);
        assert_eq!(mode(&workspace.dir.path().join("plugins")), 0o700);
        assert_eq!(mode(&workspace.dir.path().join("plugins/renderer")), 0o700);
        assert_eq!(mode(&file), 0o600);
    }
}
