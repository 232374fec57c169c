//! How fast a deleted object of a composition's release comes back, against a plain `helm
//! upgrade` run by hand to restore the same object of a release installed with `helm`, and how
//! much memory the drift watches cost the controller.
//!
//! Runs against a fresh test bed (`make bench` starts one; see `bench_support` for what it reads):
//!
//! - compositor: the operator applies a definition of fireworks-app 1.1.5; its controller
//!   Deployment is run here as a kubelet would run it, and `BENCH_SCALE` (default 50) compositions are created and
//!   left to become Ready. Then the ConfigMaps of `DELETIONS` compositions' releases are deleted
//!   one after the other, each timed from the delete until the ConfigMap is back (a new UID).
//!   `BENCH_PLACEMENT=CompositionName` puts each release in a namespace of its own, as the
//!   Tenant does: one watch per kind and namespace, so as many watches as namespaces times
//!   kinds, where one namespace for all (the default) has one per kind;
//!   `BENCH_DRIFT_WATCH=Cluster` asks for one watch per kind across the cluster instead
//!   (`spec.drift.watch`).
//!   Different objects: one object corrected again and again is a fight with another writer,
//!   which compositor ends (`DriftConflict`) rather than times;
//! - baseline: one release of the same chart and values installed with `helm install`; its
//!   ConfigMap deleted as many times, each timed from the delete until a `helm upgrade` with the
//!   same values, run at once, has returned and the ConfigMap is back;
//! - memory: the controller's VmRSS with those compositions and their drift watches; then that
//!   of a new controller once it has reconciled them all (each touched, up to date), with
//!   watches, again once the definition also says `health: {mode: Wait}` (the kinds with a
//!   status watched whole, the Pods of their namespaces too, and every Deployment kept as not
//!   healthy, since the node runs none of this chart's images: the most the health view holds),
//!   and again after the definition says `drift: {mode: Ignore}` with health Ignore, without.
//!   The new controllers have the same history, so their differences are what the watches and
//!   the health view hold.
//!
//! Figures go to stdout, progress to stderr; the exit code is non-zero when a step fails.

mod bench_support;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};

use bench_support::{
    CHART_VERSION, CONTROLLER, Error, KIND, Memory, PLURAL, Process, Summary, TestBed, VERSION,
    met, ms, times_until,
};

/// Compositions while the deletions are timed, unless `BENCH_SCALE` says otherwise.
const DEFAULT_COUNT: usize = 50;
/// Deletions timed, of compositor's object and of the baseline's.
const DELETIONS: usize = 20;
/// The definition.
const DEFINITION: &str = "fireworksapp";
/// How often the bench looks for the deleted object.
const POLL: Duration = Duration::from_millis(20);
/// How long a step may take, and how long each composition adds to the wait for all to be
/// Ready (a namespace of its own, granted by the operator, takes about a second each).
const LIMIT: Duration = Duration::from_secs(600);
const LIMIT_PER_COMPOSITION: Duration = Duration::from_millis(1500);
/// The median time to restore an object aimed at.
const GOAL: Duration = Duration::from_secs(2);
/// The most the watches may add to the controller's memory (MiB).
const MEMORY_GOAL: f64 = 5.0;

/// `spec.placement.namespace` of the definition: `BENCH_PLACEMENT`, `Composition` by default.
fn placement() -> String {
    std::env::var("BENCH_PLACEMENT").unwrap_or_else(|_| "Composition".to_string())
}

/// `spec.drift.watch` of the definition: `BENCH_DRIFT_WATCH`, `Namespaces` by default.
fn drift_watch() -> String {
    std::env::var("BENCH_DRIFT_WATCH").unwrap_or_else(|_| "Namespaces".to_string())
}

#[tokio::main]
async fn main() -> ExitCode {
    bench_support::main("drift-bench", run).await
}

async fn run(bed: &TestBed) -> Result<(), Error> {
    let count = bench_support::scale(DEFAULT_COUNT)?;
    let spec = json!({"placement": {"namespace": placement()}, "drift": {"watch": drift_watch()}});
    let served = bed.served("drift", DEFINITION, spec).await?;
    let (namespace, group) = (served.namespace, served.group);
    let (mut controller, compositions) = (served.controller, served.compositions);
    let params = PostParams::default();
    for i in 0..count {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{group}/{VERSION}"), "kind": KIND,
            "metadata": {"name": format!("app-{i}")}, "spec": values(i),
        }))?;
        compositions.create(&params, &object).await?;
    }
    let ready = |s: &Value| s["phase"] == "Ready";
    let limit = LIMIT.max(LIMIT_PER_COMPOSITION * count as u32);
    times_until(
        &compositions,
        count,
        &mut controller,
        Instant::now(),
        limit,
        ready,
    )
    .await?;
    eprintln!("{count} compositions Ready");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let watched = controller.memory()?;

    let release_namespace = |i: usize| match placement().as_str() {
        "CompositionName" => format!("app-{i}"),
        _ => namespace.clone(),
    };
    let config_maps: Vec<(Api<ConfigMap>, String)> = (0..DELETIONS)
        .map(|i| {
            let api = Api::namespaced(bed.client.clone(), &release_namespace(i));
            (api, format!("app-{i}-config"))
        })
        .collect();
    let restored = restore_times(&config_maps, || async { Ok(()) }).await?;
    controller.alive()?;
    eprintln!("compositor: {DELETIONS} deletions restored");

    let helm_namespace = bed.namespace("helm").await?;
    let release = ["baseline".to_string()];
    let chart = &bed.chart;
    let value = |_: &str| values(0);
    bed.helm_each("install", &helm_namespace, &release, chart, value, 1)
        .await?;
    let helm_maps = Api::<ConfigMap>::namespaced(bed.client.clone(), &helm_namespace);
    let upgrade = || bed.helm_each("upgrade", &helm_namespace, &release, chart, value, 1);
    let baseline = vec![(helm_maps, "baseline-config".to_string()); DELETIONS];
    let by_hand = restore_times(&baseline, || async { upgrade().await.map(|_| ()) }).await?;
    eprintln!("baseline: {DELETIONS} deletions restored by helm upgrade");

    let restart = |controller, modes| restarted(bed, &namespace, &group, controller, modes);
    let (rewatched, controller) = restart(controller, ("Correct", "Ignore")).await?;
    let (judged, controller) = restart(controller, ("Correct", "Wait")).await?;
    let (unwatched, _) = restart(controller, ("Ignore", "Ignore")).await?;
    print(
        count,
        &restored,
        &by_hand,
        [watched, rewatched, judged, unwatched],
    );
    Ok(())
}

/// Deletes each ConfigMap of `config_maps` (where, and its name) in turn, each time running
/// `restore` at once and timing until the ConfigMap is back with a new UID.
async fn restore_times<F, Fut>(
    config_maps: &[(Api<ConfigMap>, String)],
    restore: F,
) -> Result<Vec<Duration>, Error>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<(), Error>>,
{
    let mut times = Vec::new();
    for (config_maps, name) in config_maps {
        let before = config_maps.get(name).await?.uid();
        let start = Instant::now();
        config_maps.delete(name, &DeleteParams::default()).await?;
        restore().await?;
        loop {
            let now = config_maps.get_opt(name).await?.and_then(|m| m.uid());
            if now.is_some() && now != before {
                break;
            }
            if start.elapsed() > LIMIT {
                return Err(format!("ConfigMap {name} not back after {LIMIT:?}").into());
            }
            tokio::time::sleep(POLL).await;
        }
        times.push(start.elapsed());
        // Each deletion starts from a quiet controller.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(times)
}

/// A new controller in place of `controller`, with the definition's drift and health modes
/// `(drift, health)`, once it has reconciled every composition (each is touched, and is up to
/// date): its memory, and it.
async fn restarted(
    bed: &TestBed,
    namespace: &str,
    group: &str,
    mut controller: Process,
    (mode, health): (&str, &str),
) -> Result<(Memory, Process), Error> {
    let count = bench_support::scale(DEFAULT_COUNT)?;
    controller.stop();
    let drift = json!({"mode": mode, "watch": drift_watch()});
    let spec = json!({"drift": drift, "health": {"mode": health},
                      "placement": {"namespace": placement()}});
    bed.apply_definition_with(
        namespace,
        DEFINITION,
        json!({"group": group}),
        CHART_VERSION,
        spec,
    )
    .await?;
    // The controller reads the definition at start.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let gvk = GroupVersionKind::gvk(group, VERSION, KIND);
    let (mut controller, compositions) = bed
        .start_controller(namespace, CONTROLLER, &gvk, PLURAL)
        .await?;
    let touch = format!("{mode}-{health}");
    let touch = Patch::Merge(json!({"metadata": {"annotations": {"bench/touch": touch}}}));
    for i in 0..count {
        let name = format!("app-{i}");
        compositions
            .patch(&name, &PatchParams::default(), &touch)
            .await?;
    }
    let reconciles = "compositor_reconciles_total";
    let start = Instant::now();
    loop {
        let samples = controller.metrics(&bed.http).await?;
        if samples.total(reconciles) >= count as f64 {
            break;
        }
        if start.elapsed() > LIMIT {
            return Err(controller.failure("the compositions were not reconciled"));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    controller.alive()?;
    Ok((controller.memory()?, controller))
}

fn print(
    count: usize,
    restored: &[Duration],
    by_hand: &[Duration],
    [watched, rewatched, judged, unwatched]: [Memory; 4],
) {
    let (ours, theirs) = (Summary::of(restored), Summary::of(by_hand));
    println!(
        "\nDrift: {DELETIONS} deleted ConfigMaps, each of another release, with {count} \
         compositions watched (placement.namespace: {}, drift.watch: {})\n",
        placement(),
        drift_watch()
    );
    println!("| | median | max |\n|---|---|---|");
    println!(
        "| compositor restores it (goal: median < {}) | {} — goal {} | {} |",
        ms(GOAL),
        ms(ours.median),
        met(ours.median < GOAL),
        ms(ours.max)
    );
    println!(
        "| baseline: `helm upgrade` by hand, run at once | {} | {} |",
        ms(theirs.median),
        ms(theirs.max)
    );
    println!(
        "| compositor / baseline | {:.2} | {:.2} |",
        ours.median.as_secs_f64() / theirs.median.as_secs_f64(),
        ours.max.as_secs_f64() / theirs.max.as_secs_f64()
    );
    let added = rewatched.rss - unwatched.rss;
    println!(
        "\n| controller VmRSS, {count} compositions, placement.namespace {}, drift.watch {} | MiB \
         |\n|---|---|",
        placement(),
        drift_watch()
    );
    println!(
        "| with drift watches, the controller that installed them all | {:.1} |",
        watched.rss
    );
    println!(
        "| with drift watches, a new controller once all are reconciled | {:.1} |",
        rewatched.rss
    );
    println!(
        "| with drift watches and health (mode Wait), a new controller once all are reconciled \
         | {:.1} |",
        judged.rss
    );
    println!(
        "| without (drift mode Ignore), a new controller once all are reconciled | {:.1} |",
        unwatched.rss
    );
    println!(
        "| watches add, between the new controllers without health (goal ≤ {MEMORY_GOAL} MiB) | \
         {added:.1} — goal {} |",
        met(added <= MEMORY_GOAL)
    );
    let health = judged.rss - rewatched.rss;
    println!(
        "| health adds to the watches, every Deployment not healthy (goal ≤ {MEMORY_GOAL} MiB) | \
         {health:.1} — goal {} |",
        met(health <= MEMORY_GOAL)
    );
}

/// The values of composition `i`, and of the baseline release.
fn values(i: usize) -> Value {
    json!({"git": {"repository": format!("app-{i}")}})
}
