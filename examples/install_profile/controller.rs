//! The same install made by the controller: compositions created one at a time, each timed until
//! Ready, with the controller's own CPU apart from its Helm processes', and its API requests.

use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use serde_json::json;

use super::bench_support::{
    self, CHART_VERSION, CONTROLLER, Counts, Error, KIND, PLURAL, Process, Samples, TestBed,
    VERSION, delta,
};
use super::calls::median;

/// How often a composition is read while it is timed.
const POLL: Duration = Duration::from_millis(10);
/// How long the controller is given to finish the reconciles that follow the last Ready.
const SETTLE: Duration = Duration::from_secs(2);
/// How long one composition may take to become Ready.
const LIMIT: Duration = Duration::from_secs(60);

/// One composition's install by the controller, medians over the compositions (ms).
pub struct ByController {
    /// From the create to `Ready`.
    pub wall: f64,
    /// The controller's own CPU (a mean: `/proc` counts it in 10 ms ticks).
    pub own_cpu: f64,
    /// The CPU of the Helm processes it started (and theirs; a mean).
    pub helm_cpu: f64,
    /// Reconciles per composition, and the time (ms) they took in all.
    pub reconciles: f64,
    pub reconciling: f64,
    /// The controller's API requests per composition, by verb and resource.
    pub requests: Counts,
    /// Its Helm calls per composition, by verb and outcome.
    pub helm_calls: Counts,
}

/// Starts the operator and the controller of a fireworks-app definition, then creates `runs`
/// compositions one after the other.
pub async fn profile(bed: &TestBed, runs: usize) -> Result<ByController, Error> {
    const NAME: &str = "fireworksapp";
    let namespace = bed.namespace("ctl").await?;
    let group = format!("{namespace}.compositor.dev");
    let operator = bed
        .operator(&namespace, &bed.scratch("operator-cache"), "operator.log")
        .await?;
    bed.apply_definition(&namespace, NAME, json!({"group": group}), CHART_VERSION)
        .await?;
    bench_support::wait_definition(bed, &operator, &namespace, NAME).await?;
    let gvk = GroupVersionKind::gvk(&group, VERSION, KIND);
    let (mut controller, compositions) = bed
        .start_controller(&namespace, CONTROLLER, &gvk, PLURAL)
        .await?;
    bench_support::warm_up(&compositions, &composition(&group, "warm-up")?).await?;
    // The first composition fills the controller's chart cache: not timed.
    create_ready(&compositions, &mut controller, &group, "first").await?;
    let before = controller.metrics(&bed.http).await?;
    let mut wall = Vec::new();
    let (own, helm) = controller.cpu_split()?;
    for i in 0..runs {
        let took =
            create_ready(&compositions, &mut controller, &group, &format!("app-{i}")).await?;
        wall.push(took.as_secs_f64() * 1e3);
    }
    // The reconciles a composition's own status and label writes ask for.
    tokio::time::sleep(SETTLE).await;
    let (own_after, helm_after) = controller.cpu_split()?;
    let after = controller.metrics(&bed.http).await?;
    let per_composition = |counts: Counts| -> Counts {
        counts
            .into_iter()
            .map(|(key, value)| (key, value / runs as f64))
            .collect()
    };
    let requests =
        |metrics: &Samples| metrics.by("compositor_api_requests_total", &["verb", "resource"]);
    let calls = |metrics: &Samples| metrics.by("compositor_helm_calls_total", &["verb", "outcome"]);
    let added = |name: &str| (after.total(name) - before.total(name)) / runs as f64;
    Ok(ByController {
        wall: median(wall),
        own_cpu: (own_after - own) * 1e3 / runs as f64,
        helm_cpu: (helm_after - helm) * 1e3 / runs as f64,
        reconciles: added("compositor_reconciles_total"),
        reconciling: added("compositor_reconcile_duration_seconds_sum") * 1e3,
        requests: per_composition(delta(&requests(&before), &requests(&after))),
        helm_calls: per_composition(delta(&calls(&before), &calls(&after))),
    })
}

/// Creates composition `name` and waits until it is Ready; how long that took.
async fn create_ready(
    compositions: &Api<DynamicObject>,
    controller: &mut Process,
    group: &str,
    name: &str,
) -> Result<Duration, Error> {
    let start = Instant::now();
    compositions
        .create(&PostParams::default(), &composition(group, name)?)
        .await?;
    loop {
        let object = compositions.get(name).await?;
        if object.data["status"]["phase"] == "Ready" {
            return Ok(start.elapsed());
        }
        controller.alive()?;
        if start.elapsed() > LIMIT {
            let status = &object.data["status"];
            return Err(controller.failure(&format!("{name} not Ready after {LIMIT:?}: {status}")));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Composition `name`, with the values every release of the profile gets.
fn composition(group: &str, name: &str) -> Result<DynamicObject, serde_json::Error> {
    serde_json::from_value(json!({
        "apiVersion": format!("{group}/{VERSION}"), "kind": KIND,
        "metadata": {"name": name}, "spec": {"git": {"repository": name}},
    }))
}
