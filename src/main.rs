//! The `compositor` command line: parses arguments and hands off to the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

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
    Run,
    /// Run the controller of one definition version: reconcile its compositions.
    Controller,
    /// Print the CRD that a chart would become, with every lossy conversion step on stderr.
    Crd(CrdArgs),
    /// Print the operator's own CRDs.
    Crds,
    /// Print the version.
    Version,
}

/// Arguments of `compositor crd`.
#[derive(Args, Debug)]
struct CrdArgs {
    /// The chart: a directory, a `.tgz`, an `https://…/chart.tgz` URL, or `oci://host/path`.
    chart: String,
    /// Chart name inside a Helm repository (when CHART is a repository URL) or an extra OCI path segment.
    #[arg(long)]
    repo: Option<String>,
    /// Chart version or semver range (for repositories and OCI).
    #[arg(long = "chart-version")]
    chart_version: Option<String>,
    /// Name of the CRD version (default: `v` + the chart version).
    #[arg(long)]
    version_name: Option<String>,
    /// API group of the generated CRD.
    #[arg(long)]
    group: Option<String>,
    /// Kind of the generated CRD (default: derived from the chart name).
    #[arg(long)]
    kind: Option<String>,
    /// Keep schema defaults that validate, and default parent objects to `{}`.
    #[arg(long)]
    apply_defaults: bool,
    /// User name for the repository or registry.
    #[arg(long)]
    username: Option<String>,
    /// Read the password for the repository or registry from standard input.
    #[arg(long)]
    password_stdin: bool,
    /// Where downloaded charts are cached.
    #[arg(long, env = "COMPOSITOR_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Version => {
            println!("compositor {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Command::Crds => match compositor::api::crds_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("compositor: cannot print the CRDs: {error}");
                ExitCode::FAILURE
            }
        },
        Command::Crd(args) => {
            let remote = ["http://", "https://", "oci://"]
                .iter()
                .any(|scheme| args.chart.starts_with(scheme));
            if remote || args.repo.is_some() {
                eprintln!(
                    "compositor: `crd` reads a chart directory or .tgz; download {} first",
                    args.chart
                );
                return ExitCode::FAILURE;
            }
            let package = match compositor::chart::Package::load(std::path::Path::new(&args.chart))
            {
                Ok(package) => package,
                Err(error) => {
                    eprintln!("compositor: {error}");
                    return ExitCode::FAILURE;
                }
            };
            let options = compositor::crd::BuildOptions {
                names: compositor::crd::NameOverrides {
                    group: args.group,
                    kind: args.kind,
                    ..Default::default()
                },
                version_name: args.version_name,
                convert: compositor::schema::ConvertOptions {
                    apply_defaults: args.apply_defaults,
                },
                ..Default::default()
            };
            let built = compositor::crd::build(&package, &options)
                .and_then(|(crd, warnings)| Ok((compositor::crd::to_yaml(&crd)?, warnings)));
            match built {
                Ok((yaml, warnings)) => {
                    // Warnings go to stderr, one per line, so stdout stays a clean manifest.
                    for warning in &warnings {
                        eprintln!("warning: {warning}");
                    }
                    print!("{yaml}");
                    ExitCode::SUCCESS
                }
                Err(error) => {
                    eprintln!("compositor: chart {}: {error}", args.chart);
                    ExitCode::FAILURE
                }
            }
        }
        Command::Run | Command::Controller => {
            eprintln!("compositor: this command is not implemented yet");
            ExitCode::FAILURE
        }
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
