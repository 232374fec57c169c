//! How soon a composition is Ready once what its release runs is: on the test bed's node, each
//! of `COUNT` compositions of fireworks-app (running the node's pause image) is created in turn,
//! and the bench watches its Pod, its Deployment and the composition, noting when each is seen
//! Ready (the Pod's Ready condition, the Deployment's available replica, the composition's Ready
//! condition). Kubernetes' own part, from the Pod to the Deployment, is the baseline; the
//! figures are the time from the Pod to the composition, and from the Deployment to it (what
//! the controller adds), median and max.
//!
//! Runs against a fresh test bed with a node (`make bench` starts one); without a node nothing
//! runs, and the bench says so and measures nothing. Figures go to stdout, progress to stderr;
//! the exit code is non-zero when a step fails.

mod bench_support;

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde_json::json;

use bench_support::{Error, KIND, Summary, TestBed, VERSION, met, ms};

/// Compositions created in turn.
const COUNT: usize = 20;
/// The definition.
const DEFINITION: &str = "fireworksapp";
/// How long one composition may take to become Ready.
const LIMIT: Duration = Duration::from_secs(120);
/// The goals: median and max from the last Pod Ready to the composition's Ready.
const MEDIAN_GOAL: Duration = Duration::from_secs(1);
const MAX_GOAL: Duration = Duration::from_secs(2);

/// When each release's Pod, Deployment and composition were first seen Ready, by release.
#[derive(Default)]
struct Seen {
    pod: HashMap<String, Instant>,
    deployment: HashMap<String, Instant>,
    composition: HashMap<String, Instant>,
}

#[tokio::main]
async fn main() -> ExitCode {
    bench_support::main("health-bench", run).await
}

async fn run(bed: &TestBed) -> Result<(), Error> {
    if std::env::var("COMPOSITOR_TEST_NODE").is_err() {
        println!("\nHealth: no node in this test bed, so nothing runs: not measured");
        return Ok(());
    }
    let health = json!({"health": {"mode": "Wait"}});
    let served = bed.served("health", DEFINITION, health).await?;
    let (group, mut controller) = (served.group, served.controller);
    let (namespace, compositions) = (served.namespace, served.compositions);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let watching = watch(bed, &namespace, &compositions, seen.clone());

    for i in 0..COUNT {
        let name = format!("app-{i}");
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{group}/{VERSION}"), "kind": KIND,
            "metadata": {"name": name},
            "spec": {"git": {"repository": name},
                     "image": {"repository": "localhost/pause", "tag": "3.10", "pullPolicy": "Never"}},
        }))?;
        compositions.create(&PostParams::default(), &object).await?;
        let start = Instant::now();
        while !lock(&seen).composition.contains_key(&name) {
            if start.elapsed() > LIMIT {
                return Err(controller.failure(&format!("{name} was not Ready in {LIMIT:?}")));
            }
            controller.alive()?;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eprintln!("{name} Ready after {:?}", start.elapsed());
    }
    watching.abort();
    print(&lock(&seen))
}

/// Watches the Pods, Deployments and compositions in `namespace`, noting in `seen` when each
/// release's is first seen Ready.
fn watch(
    bed: &TestBed,
    namespace: &str,
    compositions: &Api<DynamicObject>,
    seen: Arc<Mutex<Seen>>,
) -> tokio::task::JoinHandle<()> {
    let pods = Api::<Pod>::namespaced(bed.client.clone(), namespace);
    let deployments = Api::<Deployment>::namespaced(bed.client.clone(), namespace);
    let pods = follow(
        pods,
        seen.clone(),
        |pod: &Pod| {
            let conditions = pod.status.as_ref()?.conditions.as_ref()?;
            let ready = conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            ready.then(|| pod.labels().get("app.kubernetes.io/instance").cloned())?
        },
        |seen| &mut seen.pod,
    );
    let deployments = follow(
        deployments,
        seen.clone(),
        |deployment: &Deployment| {
            let status = deployment.status.as_ref()?;
            (status.available_replicas.unwrap_or_default() >= 1).then(|| deployment.name_any())
        },
        |seen| &mut seen.deployment,
    );
    let compositions = follow(
        compositions.clone(),
        seen,
        |composition: &DynamicObject| {
            let conditions = composition.data["status"]["conditions"].as_array()?;
            let ready = conditions
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            ready.then(|| composition.name_any())
        },
        |seen| &mut seen.composition,
    );
    tokio::spawn(async move {
        futures::join!(pods, deployments, compositions);
    })
}

/// Follows `api`, noting under `into` when `ready` first names a release (its name, or a
/// Deployment's `<release>-web`).
async fn follow<K>(
    api: Api<K>,
    seen: Arc<Mutex<Seen>>,
    ready: impl Fn(&K) -> Option<String>,
    into: impl Fn(&mut Seen) -> &mut HashMap<String, Instant>,
) where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let events = watcher(api, watcher::Config::default()).applied_objects();
    futures::pin_mut!(events);
    while let Some(event) = events.next().await {
        let Ok(object) = event else { continue };
        if let Some(release) = ready(&object) {
            let release = release.trim_end_matches("-web").to_string();
            let mut seen = lock(&seen);
            into(&mut seen).entry(release).or_insert_with(Instant::now);
        }
    }
}

fn lock(seen: &Mutex<Seen>) -> std::sync::MutexGuard<'_, Seen> {
    seen.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn print(seen: &Seen) -> Result<(), Error> {
    let mut pod_to_ready = Vec::new();
    let mut deployment_to_ready = Vec::new();
    let mut pod_to_deployment = Vec::new();
    for (release, ready) in &seen.composition {
        let pod = seen
            .pod
            .get(release)
            .ok_or(format!("no Ready Pod of {release} seen"))?;
        let deployment = seen
            .deployment
            .get(release)
            .ok_or(format!("no available Deployment of {release} seen"))?;
        pod_to_ready.push(ready.saturating_duration_since(*pod));
        deployment_to_ready.push(ready.saturating_duration_since(*deployment));
        pod_to_deployment.push(deployment.saturating_duration_since(*pod));
    }
    let (ours, added, theirs) = (
        Summary::of(&pod_to_ready),
        Summary::of(&deployment_to_ready),
        Summary::of(&pod_to_deployment),
    );
    println!(
        "\nHealth: {COUNT} compositions of fireworks-app running the node's pause image, created \
         in turn, each watched until Ready\n"
    );
    println!("| from → to | median | max |\n|---|---|---|");
    println!(
        "| Pod Ready → composition Ready (goal: median < {}, max < {}) | {} — goal {} | {} — goal {} |",
        ms(MEDIAN_GOAL),
        ms(MAX_GOAL),
        ms(ours.median),
        met(ours.median < MEDIAN_GOAL),
        ms(ours.max),
        met(ours.max < MAX_GOAL)
    );
    println!(
        "| baseline: Pod Ready → Deployment available (Kubernetes' own) | {} | {} |",
        ms(theirs.median),
        ms(theirs.max)
    );
    println!(
        "| Deployment available → composition Ready (what the controller adds) | {} | {} |",
        ms(added.median),
        ms(added.max)
    );
    Ok(())
}
