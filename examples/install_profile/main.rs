//! Where the time of one install goes: the CPU and wall time of each part of the Helm call a
//! controller makes for a composition, against a plain `helm install` of the same chart and
//! values run in the same command.
//!
//! Runs against a fresh test bed (`make bench` starts one; see `bench_support` for what it
//! reads), `PROFILE_RUNS` (default 10) times each, medians printed:
//!
//! - offline, no cluster: `helm version` (the process start), `helm show chart` (plus the chart
//!   load) and `helm template` (plus the render);
//! - `helm install` (the baseline) and the controller's call, `Engine::upgrade_install` with the
//!   post-render gate and the owner label, each straight to the apiserver (total CPU of Helm and
//!   the processes it starts, and the apiserver's and etcd's), and the controller's call without
//!   the gate (what the post-render round trip costs);
//! - the `compositor post-render` relay alone, fed the chart's manifest;
//! - both calls again through a proxy that times every request while a sampler reads Helm's CPU
//!   every millisecond: the wall and CPU of each part, split at Helm's requests (see `timeline`);
//! - the controller making the same install: compositions created one at a time, each timed
//!   until Ready, with the controller's own CPU, its Helm processes' and its API requests.
//!
//! Figures go to stdout, progress to stderr; the exit code is non-zero when a step fails.

#[path = "../bench_support/mod.rs"]
mod bench_support;
mod calls;
mod controller;
mod sampler;
mod timeline;

use std::process::ExitCode;

use bench_support::{CHART, CHART_VERSION, Counts, Error, TestBed};
use calls::{Calls, Cost};
use timeline::Part;

/// Runs of each measurement, unless `PROFILE_RUNS` says otherwise.
const DEFAULT_RUNS: usize = 10;

#[tokio::main]
async fn main() -> ExitCode {
    bench_support::main("install-profile", run).await
}

async fn run(bed: &TestBed) -> Result<(), Error> {
    let runs = runs()?;
    let calls = Calls::new(bed).await?;
    let offline = calls.offline(runs).await?;
    eprintln!("offline: done");
    let direct = calls.direct(runs).await?;
    eprintln!("installs: done");
    let relay = calls.relay_alone(runs).await?;
    let traced = calls.traced(runs).await?;
    eprintln!("traced installs: done");
    let by_controller = controller::profile(bed, runs).await?;
    print(&offline, &direct, relay, &traced);
    print_controller(&by_controller, &direct);
    Ok(())
}

fn runs() -> Result<usize, Error> {
    match std::env::var("PROFILE_RUNS") {
        Ok(runs) if !runs.is_empty() => Ok(runs
            .parse()
            .map_err(|_| format!("PROFILE_RUNS={runs:?} is not a number"))?),
        _ => Ok(DEFAULT_RUNS),
    }
}

fn print(offline: &calls::Offline, direct: &calls::Direct, relay: Cost, traced: &calls::Traced) {
    let baseline = direct.plain;
    println!("\nOne install of {CHART} {CHART_VERSION} (Helm 4, server-side apply), medians\n");
    println!("| call | Helm CPU ms (with its children) | wall ms | apiserver + etcd CPU ms |");
    println!("|---|---|---|---|");
    let row = |what: &str, cost: Cost| {
        println!(
            "| {what} | {:.1} ({:.2}×) | {:.1} ({:.2}×) | {:.0} |",
            cost.cpu,
            cost.cpu / baseline.cpu,
            cost.wall,
            cost.wall / baseline.wall,
            cost.server
        );
    };
    row("baseline: `helm install`", baseline);
    row(
        "`helm install --disable-openapi-validation`",
        direct.unvalidated,
    );
    row(
        "controller's call: `helm upgrade --install`, gated",
        direct.gated,
    );
    row("the same without the post-render gate", direct.ungated);
    row("`helm version` (process start)", offline.version);
    row("`helm show chart` (+ chart load)", offline.show);
    row("`helm template` (+ render)", offline.template);
    row("`compositor post-render` alone", relay);
    for (what, parts) in [
        ("baseline `helm install`", &traced.plain),
        ("the controller's gated call", &traced.gated),
    ] {
        println!("\nParts of {what}, through a timing proxy (plain HTTP)\n");
        print_parts(parts, baseline);
    }
}

fn print_parts(parts: &[Part], baseline: Cost) {
    let wall: f64 = parts.iter().map(|part| part.wall).sum();
    let cpu: f64 = parts.iter().map(|part| part.cpu).sum();
    println!("| part | Helm CPU ms | share | wall ms | share |");
    println!("|---|---|---|---|---|");
    for part in parts {
        println!(
            "| {} | {:.1} | {:.0}% | {:.1} | {:.0}% |",
            part.name,
            part.cpu,
            100.0 * part.cpu / cpu,
            part.wall,
            100.0 * part.wall / wall
        );
    }
    println!(
        "| all (against the baseline's CPU and wall, straight to the apiserver) | {cpu:.1} ({:.2}×) \
         | 100% | {wall:.1} ({:.2}×) | 100% |",
        cpu / baseline.cpu,
        wall / baseline.wall
    );
}

fn print_controller(by: &controller::ByController, direct: &calls::Direct) {
    let (baseline, cpu) = (direct.plain, by.own_cpu + by.helm_cpu);
    println!("\nThe same install by the controller (`--workers 4`, one composition at a time)\n");
    println!("| measurement | value |");
    println!("|---|---|");
    println!(
        "| create → Ready | {:.1} ms ({:.2}× a `helm install`; the Helm call alone {:.1} ms) |",
        by.wall,
        by.wall / baseline.wall,
        direct.gated.wall
    );
    println!(
        "| CPU: all processes | {cpu:.1} ms ({:.2}× a `helm install`) |",
        cpu / baseline.cpu
    );
    println!(
        "| CPU: the controller itself | {:.1} ms ({:.0}%) |",
        by.own_cpu,
        100.0 * by.own_cpu / cpu
    );
    println!(
        "| CPU: its Helm processes (with the post-render relay) | {:.1} ms ({:.0}%) |",
        by.helm_cpu,
        100.0 * by.helm_cpu / cpu
    );
    println!(
        "| reconciles per composition, and their time in all | {:.1}, {:.1} ms |",
        by.reconciles, by.reconciling
    );
    let requests: f64 = by.requests.values().sum();
    println!(
        "| the controller's API requests per composition | {requests:.1} ({}) |",
        listed(&by.requests)
    );
    println!(
        "| Helm calls per composition | {} |",
        listed(&by.helm_calls)
    );
}

/// `counts` (per composition) on one line, largest first.
fn listed(counts: &Counts) -> String {
    let mut each: Vec<(&Vec<String>, &f64)> = counts.iter().collect();
    each.sort_by(|a, b| b.1.total_cmp(a.1));
    let each: Vec<String> = each
        .iter()
        .map(|(key, value)| format!("{} {value:.2}", key.join(" ")))
        .collect();
    each.join(", ")
}
