//! The `compositor` command line: parses arguments and hands off to the library.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use compositor::commands::{self, ControllerArgs, CrdArgs, PostRenderArgs, RunArgs};

/// compositor turns any Helm chart into a Kubernetes API.
#[derive(Parser, Debug)]
#[command(name = "compositor", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the operator: reconcile CompositionDefinitions.
    Run(Box<RunArgs>),
    /// Run the controller of one definition version: reconcile its compositions.
    Controller(Box<ControllerArgs>),
    /// Print the CRD that a chart would become, with every lossy conversion step on stderr.
    Crd(Box<CrdArgs>),
    /// Print the operator's own CRDs.
    Crds,
    /// Print the version.
    Version,
    /// Helm's post-renderer for a controller: relays a manifest to the controller's gate.
    #[command(hide = true)]
    PostRender(PostRenderArgs),
}

fn main() -> ExitCode {
    // Before any thread allocates, so that every one shares the few arenas it allows.
    compositor::runtime::tune_allocator();
    let result = match Cli::parse().command {
        Command::Version => {
            println!("compositor {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        Command::Crds => commands::crds(),
        // Helm runs the relay once per install: it needs no runtime, whose start took 1.6 of its
        // 4.3 ms of CPU.
        Command::PostRender(args) => commands::post_render(args),
        Command::Crd(args) => in_runtime(commands::crd(*args)),
        Command::Run(args) => in_runtime(commands::run(*args)),
        Command::Controller(args) => in_runtime(commands::controller(*args)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("compositor: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `command` to its end on a Tokio runtime, with TLS set up.
fn in_runtime(
    command: impl Future<Output = Result<(), commands::CommandError>>,
) -> Result<(), commands::CommandError> {
    compositor::runtime::init_tls();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start the runtime: {error}"))?
        .block_on(command)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
