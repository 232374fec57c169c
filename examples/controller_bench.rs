//! How fast one controller turns many compositions into Helm releases, against plain sequential
//! `helm install`s of the same chart and values, whether an idle resync makes Helm writes, and
//! how much memory the controller holds.
//!
//! Runs against a fresh test bed (`make bench` starts one; see `bench_support` for what it reads):
//!
//! - compositor: the operator applies a definition of chart fireworks-app 1.1.5 (HTTP repository,
//!   basic auth through a Secret, a CRD group of its own); its controller Deployment is run here
//!   as a kubelet would run it (its ServiceAccount's token, its arguments, `--workers 4`, an empty
//!   chart cache); once the API server takes writes of the new kind (its first write, which it
//!   holds about 2 s once per CRD version, is made as a dry run and printed apart; see
//!   `bench_support::warm_up`), `BENCH_SCALE` (default 50) compositions are created at once and
//!   timed until all are Ready;
//! - baseline: as many `helm install`s of the packaged chart with the same values, in turn and
//!   then `WORKERS` at a time (each set in a namespace of its own), with the admin credentials
//!   and Helm's default server-side apply, as the controller uses on a current apiserver (up to
//!   100 compositions: a larger scale measures memory and traffic, not Helm's speed); the time
//!   to all Ready against both, and the controller's CPU (with its Helm processes) against the
//!   sequential installs' Helm CPU, are the bench's three ratios;
//! - idle resync: once the controller is quiet, an annotation on every composition makes each
//!   reconcile once more with nothing to change; the Helm write calls (`upgrade`, `rollback`,
//!   `uninstall`) and API writes that follow, from the controller's metrics, should be none;
//! - API requests per composition, by verb and resource, from the controller's
//!   `compositor_api_requests_total`, for the apply and the idle resync, and the operator's
//!   during the apply (it grants each composition's release namespace);
//! - memory: the peak, sampled every 100 ms from the first create until all are Ready, of the
//!   sum of the VmRSS of the controller's running children (its resident Helm engines, which
//!   come and go, so a reading after the apply misses them) and of the controller's own VmRSS;
//!   the controller's VmRSS after the apply and VmRSS / VmHWM at the end (split into mapped
//!   files, above all its code, and heap), against goals at 1,000 compositions;
//! - CPU seconds of the API server and etcd, and of the controller (with its Helm processes) and
//!   the operator during the apply, or of the `helm` processes during the baseline: where the
//!   time goes on a machine whose cores are the limit.
//!
//! Figures go to stdout, progress to stderr; the exit code is non-zero when a step fails.

mod bench_support;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};

use bench_support::{
    BedCpu, CHART, CHART_VERSION, CONTROLLER, Counts, Error, KIND, Memory, PLURAL, Peak, Process,
    RESYNC_SECONDS, Samples, TestBed, VERSION, WORKERS, delta, describe, met, ratio, secs, sum,
    times_until,
};

/// Compositions, and baseline releases, unless `BENCH_SCALE` says otherwise.
const DEFAULT_COUNT: usize = 50;
/// The largest scale with a baseline.
const BASELINE_MAX: usize = 100;
/// API verbs that write.
const API_WRITES: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];
/// How long all compositions may take to become Ready.
const LIMIT: Duration = Duration::from_secs(900);
/// How long the idle resync is watched at least, and at most.
const SETTLE: Duration = Duration::from_secs(15);
const SETTLE_LIMIT: Duration = Duration::from_secs(120);
/// Helm verbs that write a release.
const WRITES: [&str; 3] = ["upgrade", "rollback", "uninstall"];
/// The ratios aimed at: all Ready against sequential and against parallel `helm install`s, and
/// the CPU of an install against a `helm install`'s.
const SEQUENTIAL_GOAL: f64 = 0.6;
const PARALLEL_GOAL: f64 = 1.0;
const CPU_GOAL: f64 = 0.6;
/// The most the controller and the operator may hold (VmHWM, MiB) with this many compositions.
const MEMORY_GOAL_SCALE: usize = 1000;
const CONTROLLER_MEMORY_GOAL: f64 = 25.0;
const OPERATOR_MEMORY_GOAL: f64 = 30.0;

#[tokio::main]
async fn main() -> ExitCode {
    bench_support::main("controller-bench", run).await
}

async fn run(bed: &TestBed) -> Result<(), Error> {
    let count = bench_support::scale(DEFAULT_COUNT)?;
    let namespace = bed.namespace("ctl").await?;
    let group = format!("{namespace}.compositor.dev");
    let operator = bed
        .operator(&namespace, &bed.scratch("operator-cache"), "operator.log")
        .await?;
    wait_definition(bed, &operator, &namespace, &group).await?;
    let operator_idle = operator.memory()?;
    let gvk = GroupVersionKind::gvk(&group, VERSION, KIND);
    let (mut controller, compositions) = bed
        .start_controller(&namespace, CONTROLLER, &gvk, PLURAL)
        .await?;
    let served = bench_support::warm_up(&compositions, &composition(&group, 0)?).await?;
    let apply = create_all(
        bed,
        &compositions,
        &group,
        &mut controller,
        &operator,
        count,
    )
    .await?;
    eprintln!(
        "compositor: {count} compositions Ready in {} (Helm calls: {})",
        secs(apply.all),
        describe(&apply.calls)
    );
    let baseline = match count <= BASELINE_MAX {
        true => Some(baseline(bed, count).await?),
        false => None,
    };
    let resync = idle_resync(bed, &compositions, &mut controller, count).await?;
    let figures = Figures {
        count,
        served,
        records: release_records(bed, &namespace).await?,
        memory: controller.memory()?,
        operator_memory: (operator_idle, operator.memory()?),
        apply,
        baseline,
        resync,
    };
    controller.alive()?;
    figures.print();
    Ok(())
}

/// The plain `helm install`s of as many releases: in turn, with the CPU they took, and
/// [`WORKERS`] at a time (as many as the controller's workers).
struct Baseline {
    sequential: Duration,
    cpu: BedCpu,
    parallel: Duration,
}

async fn baseline(bed: &TestBed, count: usize) -> Result<Baseline, Error> {
    let names: Vec<String> = (0..count).map(release).collect();
    let install = |namespace: String, at_once: usize| {
        let names = &names;
        async move {
            bed.helm_each("install", &namespace, names, &bed.chart, values, at_once)
                .await
        }
    };
    let before = BedCpu::now()?;
    let sequential = install(bed.namespace("helm").await?, 1).await?;
    let cpu = BedCpu::now()?.since(before);
    eprintln!("baseline: {count} helm installs in {}", secs(sequential));
    let parallel = install(bed.namespace("helm-parallel").await?, WORKERS.parse()?).await?;
    eprintln!(
        "baseline: {count} helm installs, {WORKERS} at a time, in {}",
        secs(parallel)
    );
    Ok(Baseline {
        sequential,
        cpu,
        parallel,
    })
}

/// Everything the bench prints.
struct Figures {
    /// How long the new kind took to be served, before the clock starts.
    served: Duration,
    count: usize,
    apply: Apply,
    baseline: Option<Baseline>,
    resync: Resync,
    records: usize,
    /// The controller's memory at the end.
    memory: Memory,
    /// The operator's memory with its definition Ready and nothing else to do, and at the end.
    operator_memory: (Memory, Memory),
}

impl Figures {
    fn print(&self) {
        let (apply, resync, count) = (&self.apply, &self.resync, self.count);
        println!(
            "\nController: {count} compositions of {CHART} {CHART_VERSION}, --workers {WORKERS}, \
             server-side apply, --resync-seconds {RESYNC_SECONDS} (no periodic resync during \
             the bench; the idle resync is one on demand)\n"
        );
        println!("| measurement | value |");
        println!("|---|---|");
        println!(
            "| the new kind's first write, a dry run (held once per CRD version; not timed) | {} \
             |",
            secs(self.served)
        );
        println!(
            "| compositor: create {count} at once → all Ready | {} (creates took {}, first Ready \
             {}, median {}) |",
            secs(apply.all),
            secs(apply.created),
            secs(apply.first),
            secs(apply.median)
        );
        match &self.baseline {
            Some(baseline) => self.print_ratios(baseline),
            None => println!("| baseline | not run above {BASELINE_MAX} compositions |"),
        }
        println!(
            "| Helm calls during the apply | {} |",
            describe(&apply.calls)
        );
        let cpu = &apply.cpu;
        println!(
            "| CPU seconds, apply | kube-apiserver {:.1}, etcd {:.1}, controller {:.1} (itself \
             {:.1}, its Helm and relay processes {:.1}), operator {:.1} |",
            cpu.bed.apiserver,
            cpu.bed.etcd,
            cpu.controller,
            cpu.controller_itself,
            cpu.controller - cpu.controller_itself,
            cpu.operator
        );
        if let Some(Baseline { cpu, .. }) = &self.baseline {
            println!(
                "| CPU seconds, sequential baseline | kube-apiserver {:.1}, etcd {:.1}, helm {:.1} \
                 |",
                cpu.apiserver, cpu.etcd, cpu.children
            );
        }
        println!(
            "| API requests per composition, apply | {} |",
            per_composition(&apply.requests, count)
        );
        println!(
            "| operator API requests per composition, apply | {} |",
            per_composition(&apply.operator_requests, count)
        );
        println!(
            "| idle resync: all {count} reconciled in | {} |",
            secs(resync.took)
        );
        println!(
            "| idle resync: Helm writes (upgrade, rollback, uninstall; goal 0) | {} — goal {} |",
            sum(&resync.writes),
            met(sum(&resync.writes) == 0.0)
        );
        let api_writes = writes(&resync.requests);
        println!(
            "| idle resync: API writes (goal 0) | {} — goal {} |",
            describe(&api_writes),
            met(sum(&api_writes) == 0.0)
        );
        println!(
            "| idle resync: reconciles / all Helm calls in {} | {} / {} |",
            secs(resync.window),
            resync.reconciles,
            describe(&resync.calls)
        );
        println!(
            "| API requests per composition, idle resync | {} |",
            per_composition(&resync.requests, count)
        );
        println!(
            "| Helm release records after the resync (one per revision; {count} expected) | {} |",
            self.records
        );
        println!(
            "| Helm engines' peak VmRSS during the apply | {:.1} MiB (the controller's own peak \
             {:.1} MiB; {} running children at the engines' peak; {} samples) |",
            apply.peak.children, apply.peak.itself, apply.peak.processes, apply.peak.samples
        );
        println!(
            "| controller VmRSS after the apply | {:.1} MiB; its Helm engine {:.1} MiB |",
            apply.memory.rss, apply.memory.engine
        );
        let (controller, (operator_idle, operator)) = (self.memory, self.operator_memory);
        println!(
            "| controller VmRSS / VmHWM at the end{} | {:.1} MiB / {:.1} MiB{} (code and other \
             files {:.1}, heap and stacks {:.1}); its Helm engine {:.1} MiB |",
            memory_goal(count, CONTROLLER_MEMORY_GOAL),
            controller.rss,
            controller.hwm,
            memory_met(count, controller.hwm, CONTROLLER_MEMORY_GOAL),
            controller.file,
            controller.anon,
            controller.engine
        );
        println!(
            "| operator VmRSS idle, with its definition Ready | {:.1} MiB |",
            operator_idle.rss
        );
        println!(
            "| operator VmRSS / VmHWM at the end{} | {:.1} MiB / {:.1} MiB{} |",
            memory_goal(count, OPERATOR_MEMORY_GOAL),
            operator.rss,
            operator.hwm,
            memory_met(count, operator.hwm, OPERATOR_MEMORY_GOAL),
        );
    }
}

/// The memory goal's text, at the scale it is set for.
impl Figures {
    /// The three ratios against the plain `helm install`s, each with its goal.
    fn print_ratios(&self, baseline: &Baseline) {
        let (count, apply) = (self.count, &self.apply);
        println!(
            "| baseline: {count} sequential `helm install` | {} |",
            secs(baseline.sequential)
        );
        println!(
            "| baseline: {count} `helm install`, {WORKERS} at a time | {} |",
            secs(baseline.parallel)
        );
        println!(
            "| CPU seconds per install | controller with its Helm processes {:.3} (itself \
             {:.3}), `helm install` {:.3} |",
            apply.cpu.controller / count as f64,
            apply.cpu.controller_itself / count as f64,
            baseline.cpu.children / count as f64
        );
        let lines = [
            (
                "all Ready / sequential `helm install`s",
                ratio(apply.all, baseline.sequential),
                SEQUENTIAL_GOAL,
            ),
            (
                "all Ready / parallel `helm install`s",
                ratio(apply.all, baseline.parallel),
                PARALLEL_GOAL,
            ),
            (
                "CPU per install: controller with its Helm processes / `helm install`",
                apply.cpu.controller / baseline.cpu.children,
                CPU_GOAL,
            ),
        ];
        for (what, ratio, goal) in lines {
            println!(
                "| {what} (goal ≤ {goal}) | {ratio:.2} — goal {} |",
                met(ratio <= goal)
            );
        }
    }
}

fn memory_goal(count: usize, goal: f64) -> String {
    if count >= MEMORY_GOAL_SCALE {
        format!(" (goal: VmHWM ≤ {goal} MiB at {MEMORY_GOAL_SCALE})")
    } else {
        String::new()
    }
}

/// Whether VmHWM `hwm` met `goal`, at the scale it is set for.
fn memory_met(count: usize, hwm: f64, goal: f64) -> String {
    if count >= MEMORY_GOAL_SCALE {
        format!(" — goal {}", met(hwm <= goal))
    } else {
        String::new()
    }
}

/// `requests` (by verb and resource) divided by `count`: the total, then each, largest first.
fn per_composition(requests: &Counts, count: usize) -> String {
    let mut each: Vec<(&Vec<String>, f64)> = requests
        .iter()
        .map(|(key, value)| (key, value / count as f64))
        .filter(|(_, value)| *value > 0.0)
        .collect();
    each.sort_by(|a, b| b.1.total_cmp(&a.1));
    let listed: Vec<String> = each
        .iter()
        .map(|(key, value)| format!("{} {value:.2}", key.join(" ")))
        .collect();
    format!(
        "{:.2} ({})",
        sum(requests) / count as f64,
        listed.join(", ")
    )
}

/// The write requests of `requests` (by verb and resource).
fn writes(requests: &Counts) -> Counts {
    requests
        .iter()
        .filter(|(key, value)| API_WRITES.contains(&key[0].as_str()) && **value > 0.0)
        .map(|(key, value)| (key.clone(), *value))
        .collect()
}

/// API requests so far, by verb and resource.
fn api_requests(metrics: &Samples) -> Counts {
    metrics.by("compositor_api_requests_total", &["verb", "resource"])
}

/// Applies the fireworks-app definition with CRD group `group` in `namespace` and waits until it
/// is Ready.
async fn wait_definition(
    bed: &TestBed,
    operator: &Process,
    namespace: &str,
    group: &str,
) -> Result<(), Error> {
    const NAME: &str = "fireworksapp";
    bed.apply_definition(namespace, NAME, json!({"group": group}), CHART_VERSION)
        .await?;
    bench_support::wait_definition(bed, operator, namespace, NAME).await
}

/// The name of composition (and release) `i`.
fn release(i: usize) -> String {
    format!("app-{i}")
}

/// The values composition and baseline release `name` get.
fn values(name: &str) -> Value {
    json!({"git": {"repository": name}})
}

/// When the compositions became Ready, from the first create; the Helm calls on the way, the
/// peak memory of the controller and its Helm engines on the way, and the controller's VmRSS
/// (MiB) once all were Ready.
struct Apply {
    cpu: ApplyCpu,
    created: Duration,
    first: Duration,
    median: Duration,
    all: Duration,
    calls: Counts,
    requests: Counts,
    /// The operator's API requests during the apply.
    operator_requests: Counts,
    /// From the first create until all were Ready.
    peak: Peak,
    memory: Memory,
}

/// CPU seconds the apply took.
struct ApplyCpu {
    bed: BedCpu,
    /// The controller with its Helm and relay processes.
    controller: f64,
    /// The controller itself.
    controller_itself: f64,
    operator: f64,
}

/// Creates `count` compositions at once and waits until every one is Ready.
async fn create_all(
    bed: &TestBed,
    compositions: &Api<DynamicObject>,
    group: &str,
    controller: &mut Process,
    operator: &Process,
    count: usize,
) -> Result<Apply, Error> {
    let objects = (0..count)
        .map(|i| composition(group, i))
        .collect::<Result<Vec<DynamicObject>, _>>()?;
    let params = PostParams::default();
    let before = controller.metrics(&bed.http).await?;
    let operator_before = operator.metrics(&bed.http).await?;
    let cpu_before = (BedCpu::now()?, controller.cpu_split()?, operator.cpu()?);
    let watch = controller.watch_peak();
    let start = Instant::now();
    create_in_batches(compositions, &params, &objects).await?;
    let created = start.elapsed();
    let times = times_until(compositions, count, controller, start, LIMIT, |status| {
        status["phase"] == "Ready"
    })
    .await?;
    let peak = watch.stop();
    let after = controller.metrics(&bed.http).await?;
    let operator_after = operator.metrics(&bed.http).await?;
    let (itself, children) = controller.cpu_split()?;
    let cpu = ApplyCpu {
        bed: BedCpu::now()?.since(cpu_before.0),
        controller: itself + children - cpu_before.1.0 - cpu_before.1.1,
        controller_itself: itself - cpu_before.1.0,
        operator: operator.cpu()? - cpu_before.2,
    };
    Ok(Apply {
        cpu,
        created,
        first: times[0],
        median: times[count / 2],
        all: times[count - 1],
        calls: delta(&helm_calls(&before), &helm_calls(&after)),
        requests: delta(&api_requests(&before), &api_requests(&after)),
        operator_requests: delta(
            &api_requests(&operator_before),
            &api_requests(&operator_after),
        ),
        peak,
        memory: controller.memory()?,
    })
}

/// Composition number `i`.
fn composition(group: &str, i: usize) -> Result<DynamicObject, serde_json::Error> {
    serde_json::from_value(json!({
        "apiVersion": format!("{group}/{VERSION}"), "kind": KIND,
        "metadata": {"name": release(i)}, "spec": values(&release(i)),
    }))
}

/// Creates `objects` at once, at most [`CREATES_AT_ONCE`] requests in flight (thousands at
/// once would exhaust the client's connections, not measure the controller).
async fn create_in_batches(
    compositions: &Api<DynamicObject>,
    params: &PostParams,
    objects: &[DynamicObject],
) -> Result<(), Error> {
    use futures::{StreamExt, TryStreamExt};
    futures::stream::iter(objects.iter().map(|o| compositions.create(params, o)))
        .buffer_unordered(CREATES_AT_ONCE)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// Creates in flight at once.
const CREATES_AT_ONCE: usize = 64;

/// What one reconcile of every composition with nothing to change did.
struct Resync {
    /// Until every composition had reconciled.
    took: Duration,
    window: Duration,
    reconciles: f64,
    calls: Counts,
    writes: Counts,
    requests: Counts,
}

/// Annotates every composition, which makes each reconcile once more, and counts the Helm calls
/// until every one has reconciled and `SETTLE` has passed.
async fn idle_resync(
    bed: &TestBed,
    compositions: &Api<DynamicObject>,
    controller: &mut Process,
    count: usize,
) -> Result<Resync, Error> {
    settle(bed, controller).await?;
    let before = controller.metrics(&bed.http).await?;
    let start = Instant::now();
    touch_all(compositions, count).await?;
    let mut took = None;
    let after = loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        controller.alive()?;
        let after = controller.metrics(&bed.http).await?;
        let reconciles = reconciles(&after) - reconciles(&before);
        if reconciles >= count as f64 {
            let took = *took.get_or_insert(start.elapsed());
            if start.elapsed() >= SETTLE.max(took * 2) {
                break after;
            }
        }
        if start.elapsed() > SETTLE_LIMIT {
            return Err(controller.failure(&format!(
                "{reconciles} of {count} compositions reconciled {SETTLE_LIMIT:?} after the touch"
            )));
        }
    };
    let calls = delta(&helm_calls(&before), &helm_calls(&after));
    let writes = calls
        .iter()
        .filter(|(key, _)| WRITES.contains(&key[0].as_str()))
        .map(|(key, value)| (key.clone(), *value))
        .collect();
    Ok(Resync {
        took: took.unwrap_or_default(),
        requests: delta(&api_requests(&before), &api_requests(&after)),
        window: start.elapsed(),
        reconciles: reconciles(&after) - reconciles(&before),
        calls,
        writes,
    })
}

/// Waits until the controller has reconciled nothing for [`QUIET`]: the reconciles its own
/// writes during the apply asked for (labelling a new composition is a change) are done.
async fn settle(bed: &TestBed, controller: &mut Process) -> Result<(), Error> {
    let start = Instant::now();
    let mut last = reconciles(&controller.metrics(&bed.http).await?);
    let mut quiet_since = Instant::now();
    while quiet_since.elapsed() < QUIET {
        if start.elapsed() > SETTLE_LIMIT {
            return Err(controller.failure("the controller never went quiet after the apply"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = reconciles(&controller.metrics(&bed.http).await?);
        if now != last {
            (last, quiet_since) = (now, Instant::now());
        }
    }
    Ok(())
}

/// How long the controller must reconcile nothing to count as idle.
const QUIET: Duration = Duration::from_secs(3);

/// Annotates every composition at once: a change that makes each reconcile, with nothing to do.
async fn touch_all(compositions: &Api<DynamicObject>, count: usize) -> Result<(), Error> {
    use futures::{StreamExt, TryStreamExt};
    let touch =
        Patch::Merge(json!({"metadata": {"annotations": {"bench.compositor.dev/touch": "1"}}}));
    let params = PatchParams::default();
    let names: Vec<String> = (0..count).map(release).collect();
    futures::stream::iter(
        names
            .iter()
            .map(|name| compositions.patch(name, &params, &touch)),
    )
    .buffer_unordered(CREATES_AT_ONCE)
    .try_collect::<Vec<_>>()
    .await?;
    Ok(())
}

/// Helm calls so far, by verb and outcome.
fn helm_calls(metrics: &Samples) -> Counts {
    metrics.by("compositor_helm_calls_total", &["verb", "outcome"])
}

/// Reconciles so far, whatever their outcome.
fn reconciles(metrics: &Samples) -> f64 {
    metrics.total("compositor_reconciles_total")
}

/// Helm's release records (one per revision) in `namespace`.
async fn release_records(bed: &TestBed, namespace: &str) -> Result<usize, Error> {
    let secrets = Api::<Secret>::namespaced(bed.client.clone(), namespace);
    let helm_owned = ListParams::default().labels("owner=helm");
    Ok(secrets.list_metadata(&helm_owned).await?.items.len())
}
