//! How long a chart-version patch takes to move every composition to the new chart, against the
//! same number of sequential `helm upgrade`s in the same run.
//!
//! Runs against a fresh test bed (`make bench` starts one; see `bench_support` for what it reads),
//! once for each count in `COUNTS`, each in a namespace and CRD group of its own:
//!
//! - compositor: the operator applies a definition of fireworks-app 1.1.5 (HTTP repository, basic
//!   auth through a Secret); its controller Deployment is run here as a kubelet would run it
//!   (`--workers 4`), and the compositions are created and left to become Ready. Then the
//!   definition is patched to 1.1.6, and timed from the patch: until the new controller
//!   Deployment exists (it is started at once, as a kubelet would), until every composition
//!   reports chart 1.1.6 and Ready (release upgraded in place, revision 2, checked), and until the
//!   old version is retired (its Deployment gone, the CRD serving only the new version);
//! - baseline: as many releases installed at 1.1.5 with the same values (not timed), then upgraded
//!   to 1.1.6 by sequential `helm upgrade`s, timed.
//!
//! Figures go to stdout, progress to stderr; the exit code is non-zero when a step fails.

mod bench_support;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use bench_support::{
    CHART, CHART_VERSION, Error, KIND, PLURAL, Process, TestBed, WORKERS, definition_ready, met,
    packaged, ratio, secs, times_until,
};
use compositor::api::CompositionDefinition;

/// How many compositions (and baseline releases) each run moves.
const COUNTS: [usize; 2] = [3, 50];
/// The chart version moved to, and the CRD versions before and after.
const NEXT_VERSION: &str = "1.1.6";
const FROM: &str = "v1-1-5";
const TO: &str = "v1-1-6";
const DEFINITION: &str = "fireworksapp";
/// How often the bench polls while timed.
const POLL: Duration = Duration::from_millis(100);
/// How long a step may take.
const LIMIT: Duration = Duration::from_secs(600);
/// The ratio compositor / baseline aimed at.
const GOAL: f64 = 0.8;

#[tokio::main]
async fn main() -> ExitCode {
    bench_support::main("move-bench", run).await
}

async fn run(bed: &TestBed) -> Result<(), Error> {
    let mut moves = Vec::new();
    for count in COUNTS {
        let figures = one_move(bed, count).await?;
        eprintln!(
            "{count}: moved in {}, baseline {}",
            secs(figures.moved),
            secs(figures.baseline)
        );
        moves.push((count, figures));
    }
    println!(
        "\nChart-version patch: {CHART} {CHART_VERSION} → {NEXT_VERSION}, compatible schema, \
         --workers {WORKERS}, times from the patch\n"
    );
    println!(
        "| compositions | new controller created | all on {NEXT_VERSION} and Ready | old version \
         retired | baseline: sequential `helm upgrade` | **moved / baseline (goal ≤ {GOAL})** |"
    );
    println!("|---|---|---|---|---|---|");
    for (count, figures) in moves {
        let ratio = ratio(figures.moved, figures.baseline);
        println!(
            "| {count} | {} | {} | {} | {} | {ratio:.2} — goal {} |",
            secs(figures.deployed),
            secs(figures.moved),
            secs(figures.retired),
            secs(figures.baseline),
            met(ratio <= GOAL)
        );
    }
    Ok(())
}

/// What one move took, from the patch; and the baseline's upgrades.
struct Figures {
    deployed: Duration,
    moved: Duration,
    retired: Duration,
    baseline: Duration,
}

/// Moves `count` compositions from 1.1.5 to 1.1.6 and upgrades as many plain releases.
async fn one_move(bed: &TestBed, count: usize) -> Result<Figures, Error> {
    let names: Vec<String> = (0..count).map(|i| format!("app-{i}")).collect();
    let helm_namespace = bed.namespace(&format!("helm-{count}")).await?;
    // Not timed: four at a time.
    bed.helm_each("install", &helm_namespace, &names, &bed.chart, values, 4)
        .await?;
    let baseline = bed
        .helm_each(
            "upgrade",
            &helm_namespace,
            &names,
            &packaged(NEXT_VERSION)?,
            values,
            1,
        )
        .await?;

    let namespace = bed.namespace(&format!("move-{count}")).await?;
    let group = format!("{namespace}.compositor.dev");
    let _operator = bed
        .operator(
            &namespace,
            &bed.scratch(&namespace),
            &format!("{namespace}.log"),
        )
        .await?;
    bed.apply_definition(
        &namespace,
        DEFINITION,
        json!({"group": group}),
        CHART_VERSION,
    )
    .await?;
    wait_definition(bed, &namespace).await?;
    let mut old = run_controller(bed, &namespace, FROM).await?;
    let compositions = compositions_at(bed, &namespace, &group, FROM);
    let params = PostParams::default();
    for name in &names {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{group}/{FROM}"), "kind": KIND,
            "metadata": {"name": name}, "spec": values(name),
        }))?;
        compositions.create(&params, &object).await?;
    }
    times_until(&compositions, count, &mut old, Instant::now(), LIMIT, |s| {
        s["phase"] == "Ready"
    })
    .await?;

    let start = Instant::now();
    bed.apply_definition(
        &namespace,
        DEFINITION,
        json!({"group": group}),
        NEXT_VERSION,
    )
    .await?;
    let deployments = Api::<Deployment>::namespaced(bed.client.clone(), &namespace);
    let new_controller = controller_name(TO);
    until(start, "the new controller Deployment", async || {
        Ok(deployments.get_opt(&new_controller).await?.is_some())
    })
    .await?;
    let deployed = start.elapsed();
    let mut new = run_controller(bed, &namespace, TO).await?;
    let moved_compositions = compositions_at(bed, &namespace, &group, TO);
    let times = times_until(&moved_compositions, count, &mut new, start, LIMIT, |s| {
        s["chart"]["version"] == NEXT_VERSION && s["phase"] == "Ready"
    })
    .await?;
    let moved = times[count - 1];
    for object in moved_compositions.list(&Default::default()).await?.items {
        let revision = &object.data["status"]["clusters"][0]["revision"];
        if revision != 2 {
            return Err(format!("{namespace}: a release is at revision {revision}, not 2").into());
        }
    }
    let crds = Api::<CustomResourceDefinition>::all(bed.client.clone());
    let crd = format!("{PLURAL}.{group}");
    let old_controller = controller_name(FROM);
    until(start, "the old version retired", async || {
        let versions: Vec<String> = crds
            .get(&crd)
            .await?
            .spec
            .versions
            .into_iter()
            .map(|v| v.name)
            .collect();
        Ok(versions == [TO] && deployments.get_opt(&old_controller).await?.is_none())
    })
    .await?;
    let retired = start.elapsed();
    old.alive()?;
    new.alive()?;
    Ok(Figures {
        deployed,
        moved,
        retired,
        baseline,
    })
}

/// The values composition and baseline release `name` get.
fn values(name: &str) -> Value {
    json!({"git": {"repository": name}})
}

/// The controller Deployment of CRD version `version`.
fn controller_name(version: &str) -> String {
    format!("{PLURAL}-{version}-controller")
}

/// Runs the controller of CRD version `version` as a kubelet would.
async fn run_controller(bed: &TestBed, namespace: &str, version: &str) -> Result<Process, Error> {
    let cache = bed.scratch(&format!("{namespace}-{version}-cache"));
    let cache = cache.to_str().ok_or("cache path is not UTF-8")?;
    bed.run_deployment(
        namespace,
        &controller_name(version),
        &["--workers", WORKERS, "--cache-dir", cache],
    )
    .await
}

/// The compositions of `namespace` through CRD version `version` of `group`.
fn compositions_at(
    bed: &TestBed,
    namespace: &str,
    group: &str,
    version: &str,
) -> Api<DynamicObject> {
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, KIND), PLURAL);
    Api::namespaced_with(bed.client.clone(), namespace, &resource)
}

/// Waits until the definition of `namespace` is Ready.
async fn wait_definition(bed: &TestBed, namespace: &str) -> Result<(), Error> {
    let definitions = Api::<CompositionDefinition>::namespaced(bed.client.clone(), namespace);
    until(Instant::now(), "the definition Ready", async || {
        Ok(definition_ready(&definitions.get(DEFINITION).await?))
    })
    .await
}

/// Polls `done` until it holds; fails `LIMIT` after `start`, naming `what`.
async fn until(
    start: Instant,
    what: &str,
    done: impl AsyncFn() -> Result<bool, Error>,
) -> Result<(), Error> {
    while !done().await? {
        if start.elapsed() > LIMIT {
            return Err(format!("{what}: not after {LIMIT:?}").into());
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}
