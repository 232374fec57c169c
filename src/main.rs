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
        // Helm runs the relay once per install: it needs no runtime, whose start took 1.6 of its
        // 4.3 ms of CPU.
        Command::PostRender(args) => commands::post_render(args),
        command => match tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime.block_on(run(command)),
            Err(error) => Err(format!("cannot start the runtime: {error}").into()),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("compositor: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command) -> Result<(), commands::CommandError> {
    compositor::runtime::init_tls();
    match command {
        Command::Version => {
            println!("compositor {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        Command::Crds => commands::crds(),
        Command::Crd(args) => commands::crd(*args).await,
        Command::Run(args) => commands::run(*args).await,
        Command::Controller(args) => commands::controller(*args).await,
        Command::PostRender(args) => commands::post_render(args),
    }
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
