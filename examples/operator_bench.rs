//! How long the operator takes from a CompositionDefinition to a usable API, against the time the
//! apiserver alone needs to establish the same CRD, and whether an idle restart writes.
//!
//! Runs against a fresh test bed (`make bench` starts one; see `bench_support` for what it
//! reads). Every definition uses chart fireworks-app 1.1.5 from the test bed's HTTP repository
//! with basic auth through a Secret, and a CRD group of its own. `RUNS` runs of each:
//!
//! - baseline: the CRD `compositor crd <chart .tgz> --group <unique>` prints, applied directly,
//!   from the apply until Established;
//! - chart not cached: a new operator with an empty chart cache per run, in a namespace of its
//!   own, from the apply of the definition (once the operator is ready) until its CRD is
//!   Established, and until the definition is Ready with its controller Deployment present;
//! - chart cached: the same with one operator whose cache already holds the chart; the definitions
//!   share a namespace, so each has a plural of its own;
//! - idle restart: with every definition of the cached phase Ready, the operator is restarted
//!   with a resync every `RESYNC` seconds and watched until it has reconciled every definition
//!   twice and `IDLE` has passed. It reaches the apiserver through a counting proxy
//!   (`bench_support::proxy`; the operator has no metric of its API calls), so its API write
//!   calls are counted exactly: the goal is none. Its reconciles and Helm calls come from its
//!   metrics.
//!
//! Figures go to stdout, progress to stderr; the exit code is non-zero when a run fails.

mod bench_support;

use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

use bench_support::proxy::CountingProxy;
use bench_support::{
    CHART_VERSION, Counts, Error, Process, Summary, TestBed, definition_ready, describe, env,
    established, met, ms, ratio, secs, sum,
};
use compositor::api::{CompositionDefinition, DEFINITION_LABEL};

/// Timed runs per measurement.
const RUNS: usize = 10;
/// How often a timed run polls.
const POLL: Duration = Duration::from_millis(25);
/// How long one run may take.
const LIMIT: Duration = Duration::from_secs(180);
/// How long the restarted operator is watched at least, and its resync period then.
const IDLE: Duration = Duration::from_secs(10);
const RESYNC: &str = "5";
/// The plural the definitions get unless told otherwise.
const PLURAL: &str = "fireworksapps";

#[tokio::main]
async fn main() -> ExitCode {
    bench_support::main("operator-bench", run).await
}

async fn run(bed: &TestBed) -> Result<(), Error> {
    let mut baseline = Vec::new();
    let mut cold = Vec::new();
    for run in 1..=RUNS {
        baseline.push(self::baseline(bed).await?);
        cold.push(not_cached(bed, run).await?);
        eprintln!(
            "run {run}/{RUNS}: baseline {}, not cached {cold}",
            ms(baseline[run - 1]),
            cold = cold[run - 1]
        );
    }
    let mut cached = Cached::start(bed).await?;
    let mut warm = Vec::new();
    for run in 1..=RUNS {
        warm.push(cached.timed(bed, run).await?);
        eprintln!("run {run}/{RUNS}: cached {}", warm[run - 1]);
    }
    let idle = cached.restart(bed).await?;

    println!(
        "\nOperator: CompositionDefinition → usable API, {} {CHART_VERSION} from the HTTP \
         repository with basic auth, {RUNS} runs each\n",
        bench_support::CHART
    );
    print_times(&baseline, &cold, &warm);
    idle.print();
    Ok(())
}

/// When a definition's CRD was Established and when the definition was Ready with its
/// controller Deployment, from the apply.
#[derive(Clone, Copy)]
struct Timing {
    established: Duration,
    ready: Duration,
}

impl std::fmt::Display for Timing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "established {}, ready {}",
            ms(self.established),
            ms(self.ready)
        )
    }
}

/// The baseline: the CRD `compositor crd` makes of the packaged chart for a new group, applied
/// directly; the time from the apply to Established.
async fn baseline(bed: &TestBed) -> Result<Duration, Error> {
    let group = format!("{}.compositor.dev", bed.unique("direct"));
    let output = Command::new(&bed.binary)
        .arg("crd")
        .arg(&bed.chart)
        .args(["--group", &group])
        .env("HELM_BIN", env("HELM_BIN")?)
        .stdin(Stdio::null())
        .output()?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(format!("compositor crd failed: {stderr}").into());
    }
    let crd: CustomResourceDefinition = serde_saphyr::from_str(&String::from_utf8(output.stdout)?)?;
    bed.apply_established(&crd, LIMIT).await
}

/// One run with the chart not cached: a new namespace, a new operator with an empty cache.
async fn not_cached(bed: &TestBed, run: usize) -> Result<Timing, Error> {
    let namespace = bed.namespace("cold").await?;
    let cache = bed.scratch(&format!("cache-cold-{run}"));
    let operator = bed
        .operator(&namespace, &cache, &format!("cold-{run}.log"))
        .await?;
    let names = json!({"group": format!("{}.compositor.dev", bed.unique("cold"))});
    apply_timed(bed, &operator, &namespace, "fireworksapp", names).await
}

/// Applies definition `name` in `namespace` with `names` and times it until its CRD is
/// Established and until it is Ready with a controller Deployment.
async fn apply_timed(
    bed: &TestBed,
    operator: &Process,
    namespace: &str,
    name: &str,
    names: Value,
) -> Result<Timing, Error> {
    let plural = names["plural"].as_str().unwrap_or(PLURAL);
    let crd_name = format!("{plural}.{}", names["group"].as_str().unwrap_or_default());
    let definitions = Api::<CompositionDefinition>::namespaced(bed.client.clone(), namespace);
    let crds = Api::<CustomResourceDefinition>::all(bed.client.clone());
    let deployments = Api::<Deployment>::namespaced(bed.client.clone(), namespace);

    let start = Instant::now();
    let applied = bed
        .apply_definition(namespace, name, names, CHART_VERSION)
        .await?;
    let selector = format!(
        "{DEFINITION_LABEL}={}",
        compositor::definition::bundle::definition_label(&applied)
    );
    let mut established_at = None;
    let mut ready_at = None;
    loop {
        if established_at.is_none()
            && crds
                .get_opt(&crd_name)
                .await?
                .is_some_and(|c| established(&c))
        {
            established_at = Some(start.elapsed());
        }
        if ready_at.is_none()
            && definition_ready(&definitions.get(name).await?)
            && !deployments
                .list(&ListParams::default().labels(&selector))
                .await?
                .items
                .is_empty()
        {
            ready_at = Some(start.elapsed());
        }
        if let (Some(established), Some(ready)) = (established_at, ready_at) {
            return Ok(Timing { established, ready });
        }
        if start.elapsed() > LIMIT {
            let status = definitions.get(name).await?.status;
            return Err(operator.failure(&format!(
                "{namespace}/{name}: CRD Established after {established_at:?}, Ready after \
                 {ready_at:?}, given {LIMIT:?}; status {status:?}"
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The chart cached: one operator in one namespace, whose cache a first, untimed definition
/// filled.
struct Cached {
    namespace: String,
    operator: Process,
    definitions: usize,
}

impl Cached {
    async fn start(bed: &TestBed) -> Result<Self, Error> {
        let namespace = bed.namespace("warm").await?;
        let operator = bed
            .operator(&namespace, &bed.scratch("cache-warm"), "warm.log")
            .await?;
        let names = json!({"group": format!("{}.compositor.dev", bed.unique("warm"))});
        apply_timed(bed, &operator, &namespace, "fireworksapp", names).await?;
        Ok(Cached {
            namespace,
            operator,
            definitions: 1,
        })
    }

    /// One timed run: a new definition with a group and plural of its own.
    async fn timed(&mut self, bed: &TestBed, run: usize) -> Result<Timing, Error> {
        let names = json!({
            "group": format!("{}.compositor.dev", bed.unique("warm")),
            "plural": format!("{PLURAL}{run}"),
        });
        let name = format!("fireworksapp{run}");
        let timing = apply_timed(bed, &self.operator, &self.namespace, &name, names).await?;
        self.definitions += 1;
        Ok(timing)
    }

    /// Stops the operator and starts it again through a counting proxy with a resync every
    /// `RESYNC` seconds; counts what it writes until it has reconciled every definition twice
    /// (the restart, then a resync) and `IDLE` has passed.
    async fn restart(mut self, bed: &TestBed) -> Result<Idle, Error> {
        self.operator.stop();
        let proxy = CountingProxy::start(bed.client.clone()).await?;
        let kubeconfig = bed.scratch("proxy.kubeconfig");
        proxy.write_kubeconfig(&kubeconfig)?;
        let cache = bed.scratch("cache-warm");
        let extra = ["--resync-seconds", RESYNC];
        let mut operator = bed
            .operator_with(&self.namespace, &cache, "restart.log", &kubeconfig, &extra)
            .await?;
        let start = Instant::now();
        let wanted = 2.0 * self.definitions as f64;
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            operator.alive()?;
            let metrics = operator.metrics(&bed.http).await?;
            let reconciles = metrics.total("compositor_reconciles_total");
            if reconciles >= wanted && start.elapsed() >= IDLE {
                return Ok(Idle {
                    definitions: self.definitions,
                    window: start.elapsed(),
                    writes: proxy.requests(true),
                    reads: sum(&proxy.requests(false)),
                    reconciles: metrics.by("compositor_reconciles_total", &["outcome"]),
                    helm: metrics.by("compositor_helm_calls_total", &["verb", "outcome"]),
                });
            }
            if start.elapsed() > LIMIT {
                let what = format!("{reconciles} of {wanted} reconciles after {LIMIT:?}");
                return Err(operator.failure(&what));
            }
        }
    }
}

/// What an idle restart did.
struct Idle {
    definitions: usize,
    window: Duration,
    writes: Counts,
    reads: f64,
    reconciles: Counts,
    helm: Counts,
}

impl Idle {
    fn print(&self) {
        println!(
            "\nIdle restart: {} definitions Ready; the operator restarted with a resync every \
             {RESYNC} s, watched for {}\n",
            self.definitions,
            secs(self.window)
        );
        println!("| measurement | value |");
        println!("|---|---|");
        println!(
            "| operator reconciles, by outcome (every definition about twice) | {} |",
            describe(&self.reconciles)
        );
        println!("| operator API read calls | {} |", self.reads);
        println!(
            "| operator API write calls (goal 0) | {} ({}) — goal {} |",
            sum(&self.writes),
            describe(&self.writes),
            met(sum(&self.writes) == 0.0)
        );
        println!("| operator Helm calls | {} |", describe(&self.helm));
    }
}

/// The timing table: every phase's median, minimum and maximum, and its median against the
/// baseline's.
fn print_times(baseline: &[Duration], cold: &[Timing], warm: &[Timing]) {
    let base = Summary::of(baseline);
    println!("| from apply | median | min | max | median / baseline |");
    println!("|---|---|---|---|---|");
    let row = |label: &str, summary: &Summary| {
        println!(
            "| {label} | {} | {} | {} | {:.2} |",
            ms(summary.median),
            ms(summary.min),
            ms(summary.max),
            ratio(summary.median, base.median)
        );
    };
    row("baseline: raw CRD → Established", &base);
    for (phase, timings) in [("chart not cached", cold), ("chart cached", warm)] {
        let established: Vec<Duration> = timings.iter().map(|t| t.established).collect();
        let ready: Vec<Duration> = timings.iter().map(|t| t.ready).collect();
        row(
            &format!("{phase}: definition → CRD Established"),
            &Summary::of(&established),
        );
        row(
            &format!("{phase}: definition → Ready + controller Deployment"),
            &Summary::of(&ready),
        );
    }
}
