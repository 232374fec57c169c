//! `compositor crd`: the CRD a chart becomes, printed without a cluster.

use std::io::Read;
use std::path::PathBuf;

use clap::Args;

use super::{CommandError, context, default_cache_dir};
use crate::api::{NameOverrides, SchemaInference};
use crate::chart::{self, Cache, ChartRef};
use crate::crd::{self, BuildOptions};
use crate::schema::ConvertOptions;

/// Flags of `compositor crd`.
#[derive(Args, Debug)]
pub struct CrdArgs {
    /// The chart: a directory, a `.tgz`, a Helm repository URL (with --repo), an
    /// `https://…/chart.tgz` URL, or `oci://host/path`.
    pub chart: String,
    /// Chart name inside a Helm repository, or an extra OCI path segment.
    #[arg(long)]
    pub repo: Option<String>,
    /// Chart version or semver range (for repositories and OCI).
    #[arg(long = "chart-version")]
    pub chart_version: Option<String>,
    /// Name of the CRD version (default: `v` + the chart version).
    #[arg(long)]
    pub version_name: Option<String>,
    /// API group of the generated CRD.
    #[arg(long)]
    pub group: Option<String>,
    /// Kind of the generated CRD (default: derived from the chart name).
    #[arg(long)]
    pub kind: Option<String>,
    /// Keep schema defaults that validate, and default parent objects to `{}`.
    #[arg(long)]
    pub apply_defaults: bool,
    /// When to infer the schema from values.yaml: Always, WhenMissing (no values.schema.json)
    /// or Never.
    #[arg(long, default_value = "WhenMissing", value_parser = inference)]
    pub infer: SchemaInference,
    /// A dotted values path an inferred schema leaves open to any value (repeatable; `.` for
    /// the whole spec).
    #[arg(long = "open-key")]
    pub open_keys: Vec<String>,
    /// User name for the repository or registry.
    #[arg(long)]
    pub username: Option<String>,
    /// Read the password for the repository or registry from standard input.
    #[arg(long, requires = "username")]
    pub password_stdin: bool,
    /// Skip verification of the server's TLS certificate.
    #[arg(long)]
    pub insecure_skip_tls_verify: bool,
    /// Where downloaded charts are cached.
    #[arg(long, env = "COMPOSITOR_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
}

/// `compositor crd`: prints the CRD a chart becomes on stdout, its lossy steps on stderr.
pub async fn crd(args: CrdArgs) -> Result<(), CommandError> {
    let mut reference = ChartRef {
        url: args.chart.clone(),
        repo: args.repo.clone(),
        version: args.chart_version.clone(),
        insecure_skip_verify_tls: args.insecure_skip_tls_verify,
        ..ChartRef::default()
    };
    if let Some(username) = &args.username {
        let mut password = String::new();
        if args.password_stdin {
            std::io::stdin()
                .read_to_string(&mut password)
                .map_err(context("reading the password from stdin"))?;
        }
        reference = reference.with_basic_auth(username, password.trim_end_matches(['\r', '\n']));
    }
    let cache = Cache::open(args.cache_dir.clone().unwrap_or_else(default_cache_dir))
        .map_err(context("opening the chart cache"))?;
    let package = chart::load_or_fetch(&reference, &cache)
        .await
        .map_err(context(format!("chart {}", args.chart)))?;
    let options = BuildOptions {
        names: NameOverrides {
            group: args.group,
            kind: args.kind,
            ..NameOverrides::default()
        },
        version_name: args.version_name,
        convert: ConvertOptions {
            apply_defaults: args.apply_defaults,
            infer: args.infer,
            open_keys: args.open_keys,
        },
        ..BuildOptions::default()
    };
    let (crd, notes) =
        crd::build(&package, &options).map_err(context(format!("chart {}", args.chart)))?;
    let yaml = crd::to_yaml(&crd).map_err(context("writing the CRD"))?;
    // Warnings and inference lines go to stderr, one per line, so stdout stays a clean manifest.
    for warning in &notes.warnings {
        eprintln!("warning: {warning}");
    }
    for line in notes.inferred.iter().flat_map(|report| report.lines()) {
        eprintln!("inferred: {line}");
    }
    print!("{yaml}");
    Ok(())
}

/// `Always`, `WhenMissing` or `Never`, as `spec.schema.infer` spells them.
fn inference(text: &str) -> Result<SchemaInference, String> {
    serde_json::from_value(serde_json::Value::String(text.to_owned()))
        .map_err(|_| format!("{text:?} is not one of Always, WhenMissing, Never"))
}
