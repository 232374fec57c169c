//! The edge: each subcommand's flags and what it does, with errors reported with context.
//!
//! `run` (the operator) and `controller` (one definition version's controller) are the two
//! roles: they share their process flags and start-up ([`ProcessArgs`]) and differ in what
//! they reconcile.

mod crd;
mod process;
mod roles;

pub use crd::{CrdArgs, crd};
pub use process::ProcessArgs;
pub use roles::{ControllerArgs, RunArgs, controller, run};

use std::io::Read;
use std::path::PathBuf;

use clap::Args;

use crate::helm;
use crate::runtime;

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

/// `compositor crds`: prints the operator's own CRDs.
pub fn crds() -> Result<(), CommandError> {
    print!(
        "{}",
        crate::api::crds_yaml().map_err(context("writing the CRDs"))?
    );
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
