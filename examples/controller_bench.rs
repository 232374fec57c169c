//! How fast one controller turns many compositions into Helm releases, against plain sequential
//! `helm install`s of the same chart and values, whether an idle resync makes Helm writes, and
//! how much memory the controller holds.
//!
//! Runs against a fresh test bed (`make bench` starts one; see `bench_support` for what it reads):
//!
//! - compositor: the operator applies a definition of chart fireworks-app 1.1.5 (HTTP repository,
//!   basic auth through a Secret, a CRD group of its own); its controller Deployment is run here
//!   as a kubelet would run it (its ServiceAccount's token, its arguments, `--workers 4`, an empty
//!   chart cache); then `COUNT` compositions are created at once and timed until all are Ready;
//! - baseline: `COUNT` sequential `helm install`s of the packaged chart with the same values, in
//!   a namespace of their own, with the admin credentials and Helm's default server-side apply,
//!   as the controller uses on a current apiserver;
//! - idle resync: an annotation on every composition makes each reconcile once more with nothing
//!   to change; the Helm write calls (`upgrade`, `rollback`, `uninstall`) that follow, from the
//!   controller's metrics, should be none;
//! - memory: the controller's VmRSS after the apply and VmRSS / VmHWM at the end.
//!
//! Figures go to stdout, progress to stderr; the exit code is non-zero when a step fails.

mod bench_support;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use bench_support::{
    CHART, CHART_VERSION, Counts, Error, Process, Samples, TestBed, definition_ready, delta,
    describe, met, ratio, secs, sum, times_until,
};
use compositor::api::CompositionDefinition;

/// Compositions, and baseline releases.
const COUNT: usize = 50;
/// The controller's `--workers`.
const WORKERS: &str = "4";
/// The CRD version, kind and plural the definition gets, and its controller Deployment.
const VERSION: &str = "v1-1-5";
const KIND: &str = "FireworksApp";
const PLURAL: &str = "fireworksapps";
const CONTROLLER: &str = "fireworksapps-v1-1-5-controller";
/// How long the definition may take to become Ready.
const DEFINITION_LIMIT: Duration = Duration::from_secs(180);
/// How long all compositions may take to become Ready.
const LIMIT: Duration = Duration::from_secs(900);
/// How long the idle resync is watched at least, and at most.
const SETTLE: Duration = Duration::from_secs(15);
const SETTLE_LIMIT: Duration = Duration::from_secs(120);
/// Helm verbs that write a release.
const WRITES: [&str; 3] = ["upgrade", "rollback", "uninstall"];
/// The ratio compositor / baseline aimed at.
const GOAL: f64 = 1.15;

#[tokio::main]
async fn main() -> ExitCode {
    bench_support::main("controller-bench", run).await
}

async fn run(bed: &TestBed) -> Result<(), Error> {
    let namespace = bed.namespace("ctl").await?;
    let group = format!("{namespace}.compositor.dev");
    let operator = bed
        .operator(&namespace, &bed.scratch("operator-cache"), "operator.log")
        .await?;
    wait_definition(bed, &operator, &namespace, &group).await?;
    let operator_idle = operator.memory()?;
    let cache = bed.scratch("controller-cache");
    let cache = cache.to_str().ok_or("cache path is not UTF-8")?;
    let extra = ["--workers", WORKERS, "--cache-dir", cache];
    let mut controller = bed.run_deployment(&namespace, CONTROLLER, &extra).await?;
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(&group, VERSION, KIND), PLURAL);
    let compositions =
        Api::<DynamicObject>::namespaced_with(bed.client.clone(), &namespace, &resource);

    let apply = create_all(bed, &compositions, &group, &mut controller).await?;
    eprintln!(
        "compositor: {COUNT} compositions Ready in {} (Helm calls: {})",
        secs(apply.all),
        describe(&apply.calls)
    );
    let names: Vec<String> = (0..COUNT).map(release).collect();
    let helm_namespace = bed.namespace("helm").await?;
    let baseline = bed
        .helm_each("install", &helm_namespace, &names, &bed.chart, values)
        .await?;
    eprintln!("baseline: {COUNT} helm installs in {}", secs(baseline));
    let resync = idle_resync(bed, &compositions, &mut controller).await?;
    let figures = Figures {
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

/// Everything the bench prints.
struct Figures {
    apply: Apply,
    baseline: Duration,
    resync: Resync,
    records: usize,
    /// The controller's VmRSS and VmHWM at the end, in MiB.
    memory: (f64, f64),
    /// The operator's VmRSS and VmHWM with its definition Ready and nothing else to do, and at
    /// the end, in MiB.
    operator_memory: ((f64, f64), (f64, f64)),
}

impl Figures {
    fn print(&self) {
        let (apply, resync) = (&self.apply, &self.resync);
        let compositor_ratio = ratio(apply.all, self.baseline);
        println!(
            "\nController: {COUNT} compositions of {CHART} {CHART_VERSION}, --workers {WORKERS}, \
             server-side apply\n"
        );
        println!("| measurement | value |");
        println!("|---|---|");
        println!(
            "| compositor: create {COUNT} at once → all Ready | {} (creates took {}, first Ready \
             {}, median {}) |",
            secs(apply.all),
            secs(apply.created),
            secs(apply.first),
            secs(apply.median)
        );
        println!(
            "| baseline: {COUNT} sequential `helm install` | {} |",
            secs(self.baseline)
        );
        println!(
            "| compositor / baseline (goal ≤ {GOAL}) | {compositor_ratio:.2} — goal {} |",
            met(compositor_ratio <= GOAL)
        );
        println!(
            "| Helm calls during the apply | {} |",
            describe(&apply.calls)
        );
        println!(
            "| idle resync: Helm writes (upgrade, rollback, uninstall; goal 0) | {} — goal {} |",
            sum(&resync.writes),
            met(sum(&resync.writes) == 0.0)
        );
        println!(
            "| idle resync: reconciles / all Helm calls in {} | {} / {} |",
            secs(resync.window),
            resync.reconciles,
            describe(&resync.calls)
        );
        println!(
            "| Helm release records after the resync (one per revision; {COUNT} expected) | {} |",
            self.records
        );
        println!(
            "| controller VmRSS after the apply | {:.1} MiB |",
            apply.rss
        );
        let (rss, hwm) = self.memory;
        println!("| controller VmRSS / VmHWM at the end | {rss:.1} MiB / {hwm:.1} MiB |");
        let ((idle, _), (rss, hwm)) = self.operator_memory;
        println!("| operator VmRSS idle, with its definition Ready | {idle:.1} MiB |");
        println!("| operator VmRSS / VmHWM at the end | {rss:.1} MiB / {hwm:.1} MiB |");
    }
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
    let definitions = Api::<CompositionDefinition>::namespaced(bed.client.clone(), namespace);
    let start = Instant::now();
    loop {
        let definition = definitions.get(NAME).await?;
        if definition_ready(&definition) {
            return Ok(());
        }
        if start.elapsed() > DEFINITION_LIMIT {
            return Err(operator.failure(&format!(
                "the definition was not Ready after {DEFINITION_LIMIT:?}; status {:?}",
                definition.status
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The name of composition (and release) `i`.
fn release(i: usize) -> String {
    format!("app-{i}")
}

/// The values composition and baseline release `name` get.
fn values(name: &str) -> Value {
    json!({"git": {"repository": name}})
}

/// When the compositions became Ready, from the first create; the Helm calls on the way and the
/// controller's VmRSS (MiB) once all were Ready.
struct Apply {
    created: Duration,
    first: Duration,
    median: Duration,
    all: Duration,
    calls: Counts,
    rss: f64,
}

/// Creates `COUNT` compositions at once and waits until every one is Ready.
async fn create_all(
    bed: &TestBed,
    compositions: &Api<DynamicObject>,
    group: &str,
    controller: &mut Process,
) -> Result<Apply, Error> {
    let objects = (0..COUNT)
        .map(|i| {
            serde_json::from_value(json!({
                "apiVersion": format!("{group}/{VERSION}"), "kind": KIND,
                "metadata": {"name": release(i)}, "spec": values(&release(i)),
            }))
        })
        .collect::<Result<Vec<DynamicObject>, _>>()?;
    let params = PostParams::default();
    let before = helm_calls(&controller.metrics(&bed.http).await?);
    let start = Instant::now();
    futures::future::try_join_all(objects.iter().map(|o| compositions.create(&params, o))).await?;
    let created = start.elapsed();
    let times = times_until(compositions, COUNT, controller, start, LIMIT, |status| {
        status["phase"] == "Ready"
    })
    .await?;
    let after = helm_calls(&controller.metrics(&bed.http).await?);
    Ok(Apply {
        created,
        first: times[0],
        median: times[COUNT / 2],
        all: times[COUNT - 1],
        calls: delta(&before, &after),
        rss: controller.memory()?.0,
    })
}

/// What one reconcile of every composition with nothing to change did.
struct Resync {
    window: Duration,
    reconciles: f64,
    calls: Counts,
    writes: Counts,
}

/// Annotates every composition, which makes each reconcile once more, and counts the Helm calls
/// until every one has reconciled and `SETTLE` has passed.
async fn idle_resync(
    bed: &TestBed,
    compositions: &Api<DynamicObject>,
    controller: &mut Process,
) -> Result<Resync, Error> {
    let before = controller.metrics(&bed.http).await?;
    let start = Instant::now();
    touch_all(compositions).await?;
    let after = loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        controller.alive()?;
        let after = controller.metrics(&bed.http).await?;
        let reconciles = reconciles(&after) - reconciles(&before);
        if reconciles >= COUNT as f64 && start.elapsed() >= SETTLE {
            break after;
        }
        if start.elapsed() > SETTLE_LIMIT {
            return Err(controller.failure(&format!(
                "{reconciles} of {COUNT} compositions reconciled {SETTLE_LIMIT:?} after the touch"
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
        window: start.elapsed(),
        reconciles: reconciles(&after) - reconciles(&before),
        calls,
        writes,
    })
}

/// Annotates every composition at once: a change that makes each reconcile, with nothing to do.
async fn touch_all(compositions: &Api<DynamicObject>) -> Result<(), Error> {
    let touch =
        Patch::Merge(json!({"metadata": {"annotations": {"bench.compositor.dev/touch": "1"}}}));
    let params = PatchParams::default();
    let names: Vec<String> = (0..COUNT).map(release).collect();
    futures::future::try_join_all(
        names
            .iter()
            .map(|name| compositions.patch(name, &params, &touch)),
    )
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
