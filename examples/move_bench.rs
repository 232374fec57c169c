//! How long a chart-version patch takes to move every composition to the new chart, against the
//! same number of sequential `helm upgrade`s in the same run; how much the rollout's pacing
//! costs against moving every composition at once; and what a bad version touches.
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
//!   to 1.1.6 by sequential `helm upgrade`s, timed;
//! - pacing: the move of 50 with the definition's default `spec.rollout` (the canary alone, then
//!   25% at a time) against `canary: 0, maxUnavailable: 100%` (every composition at once);
//! - a bad version: 1.1.7, published here, renders a ConfigMap the API server refuses; timed from
//!   the patch until the rollout is rolled back and every composition is Ready on 1.1.5 again,
//!   counting the releases that were touched (a revision past 1).
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
    CHART, CHART_VERSION, Error, KIND, PLURAL, Process, TestBed, WORKERS, definition_ready, env,
    met, packaged, ratio, secs, times_until,
};
use compositor::api::{CompositionDefinition, RolloutPhase};

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
/// The ratio paced / all at once aimed at.
const PACING_GOAL: f64 = 1.5;
/// The bad chart version, and its CRD version.
const BAD_VERSION: &str = "1.1.7";
const BAD: &str = "v1-1-7";
/// Its rollout's health timeout (the default); a bad version is rolled back within it + 30 s.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(300);

#[tokio::main]
async fn main() -> ExitCode {
    bench_support::main("move-bench", run).await
}

async fn run(bed: &TestBed) -> Result<(), Error> {
    let mut moves = Vec::new();
    for count in COUNTS {
        let figures = one_move(bed, count, json!({})).await?;
        eprintln!(
            "{count}: moved in {}, baseline {}",
            secs(figures.moved),
            secs(figures.baseline)
        );
        moves.push((count, figures));
    }
    println!(
        "\nChart-version patch: {CHART} {CHART_VERSION} → {NEXT_VERSION}, compatible schema, \
         --workers {WORKERS}, the default rollout, times from the patch\n"
    );
    println!(
        "| compositions | new controller created | all on {NEXT_VERSION} and Ready | old version \
         retired | baseline: sequential `helm upgrade` | **moved / baseline (goal ≤ {GOAL})** |"
    );
    println!("|---|---|---|---|---|---|");
    for (count, figures) in &moves {
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
    let count = COUNTS[COUNTS.len() - 1];
    let at_once = json!({"canary": 0, "maxUnavailable": "100%"});
    let all = one_move(bed, count, at_once).await?;
    let paced = &moves[moves.len() - 1].1;
    let ratio = ratio(paced.moved, all.moved);
    println!("\nPacing, {count} compositions: the default rollout against all at once\n");
    println!(
        "| all on {NEXT_VERSION}: paced (canary 1, then 25%) | all at once | \
         **paced / all at once (goal ≤ {PACING_GOAL})** |"
    );
    println!("|---|---|---|");
    println!(
        "| {} | {} | {ratio:.2} — goal {} |",
        secs(paced.moved),
        secs(all.moved),
        met(ratio <= PACING_GOAL)
    );
    let bad = bad_move(bed, count).await?;
    let goal = HEALTH_TIMEOUT + Duration::from_secs(30);
    println!(
        "\nA bad version ({BAD_VERSION}: the API server refuses a ConfigMap), {count} compositions\n"
    );
    println!(
        "| releases touched (goal: the canary, 1) | patch → rolled back, every composition Ready \
         on {CHART_VERSION} (goal ≤ {}) |",
        secs(goal)
    );
    println!("|---|---|");
    println!(
        "| {} — {} | {} — {} |",
        bad.touched,
        met(bad.touched == 1),
        secs(bad.rolled_back),
        met(bad.rolled_back <= goal)
    );
    Ok(())
}

/// What one move took, from the patch; and the baseline's upgrades.
struct Figures {
    deployed: Duration,
    moved: Duration,
    retired: Duration,
    baseline: Duration,
}

/// Moves `count` compositions from 1.1.5 to 1.1.6 under `rollout` (the definition's
/// `spec.rollout`) and upgrades as many plain releases.
async fn one_move(bed: &TestBed, count: usize, rollout: Value) -> Result<Figures, Error> {
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

    let pace = if rollout == json!({}) {
        "paced"
    } else {
        "at-once"
    };
    let namespace = bed.namespace(&format!("move-{count}-{pace}")).await?;
    let group = format!("{namespace}.compositor.dev");
    let more = json!({"rollout": rollout});
    let Fleet { _operator, mut old } = Fleet::at_1_1_5(bed, &namespace, &names, &more).await?;

    let start = Instant::now();
    bed.apply_definition_with(
        &namespace,
        DEFINITION,
        json!({"group": group}),
        NEXT_VERSION,
        more,
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

/// A definition of fireworks-app 1.1.5 in `namespace`, its operator and controller, and its
/// compositions, each Ready.
struct Fleet {
    _operator: Process,
    old: Process,
}

impl Fleet {
    /// Applies the definition with `more` of its spec, runs its controller, creates a
    /// composition for each of `names` and waits until each is Ready.
    async fn at_1_1_5(
        bed: &TestBed,
        namespace: &str,
        names: &[String],
        more: &Value,
    ) -> Result<Fleet, Error> {
        let group = format!("{namespace}.compositor.dev");
        let log = format!("{namespace}.log");
        let _operator = bed
            .operator(namespace, &bed.scratch(namespace), &log)
            .await?;
        let names_of = json!({"group": group});
        bed.apply_definition_with(namespace, DEFINITION, names_of, CHART_VERSION, more.clone())
            .await?;
        wait_definition(bed, namespace).await?;
        let mut old = run_controller(bed, namespace, FROM).await?;
        let compositions = compositions_at(bed, namespace, &group, FROM);
        let params = PostParams::default();
        for name in names {
            let object: DynamicObject = serde_json::from_value(json!({
                "apiVersion": format!("{group}/{FROM}"), "kind": KIND,
                "metadata": {"name": name}, "spec": values(name),
            }))?;
            compositions.create(&params, &object).await?;
        }
        let count = names.len();
        times_until(&compositions, count, &mut old, Instant::now(), LIMIT, |s| {
            s["phase"] == "Ready"
        })
        .await?;
        Ok(Fleet { _operator, old })
    }
}

/// What a bad version did.
struct Bad {
    /// Releases upgraded at all (a revision past 1).
    touched: usize,
    /// From the patch until it was rolled back and every composition was Ready on 1.1.5.
    rolled_back: Duration,
}

/// Patches `count` compositions' definition to the bad version and waits until it is rolled
/// back.
async fn bad_move(bed: &TestBed, count: usize) -> Result<Bad, Error> {
    publish_bad_version(bed)?;
    let names: Vec<String> = (0..count).map(|i| format!("app-{i}")).collect();
    let namespace = bed.namespace(&format!("bad-{count}")).await?;
    let group = format!("{namespace}.compositor.dev");
    let Fleet { _operator, mut old } = Fleet::at_1_1_5(bed, &namespace, &names, &json!({})).await?;
    let start = Instant::now();
    bed.apply_definition(&namespace, DEFINITION, json!({"group": group}), BAD_VERSION)
        .await?;
    let deployments = Api::<Deployment>::namespaced(bed.client.clone(), &namespace);
    let bad_controller = controller_name(BAD);
    until(
        start,
        "the bad version's controller Deployment",
        async || Ok(deployments.get_opt(&bad_controller).await?.is_some()),
    )
    .await?;
    let mut bad = run_controller(bed, &namespace, BAD).await?;
    let definitions = Api::<CompositionDefinition>::namespaced(bed.client.clone(), &namespace);
    until(start, "the bad version rolled back", async || {
        let definition = definitions.get(DEFINITION).await?;
        let rollout = definition.status.and_then(|s| s.rollout);
        Ok(rollout.is_some_and(|r| r.phase == RolloutPhase::RolledBack))
    })
    .await?;
    let compositions = compositions_at(bed, &namespace, &group, FROM);
    until(
        start,
        "every composition Ready on 1.1.5 again",
        async || {
            let listed = compositions.list(&Default::default()).await?.items;
            Ok(listed.iter().all(|object| {
                let status = &object.data["status"];
                let entry = &status["clusters"][0];
                let label = object
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("compositor.dev/version"));
                label.map(String::as_str) == Some(FROM)
                    && entry["chartVersion"] == CHART_VERSION
                    && status["phase"] == "Ready"
            }))
        },
    )
    .await?;
    let rolled_back = start.elapsed();
    let listed = compositions.list(&Default::default()).await?.items;
    let touched = listed
        .iter()
        .filter(|o| o.data["status"]["clusters"][0]["revision"] != 1)
        .count();
    old.alive()?;
    bad.alive()?;
    Ok(Bad {
        touched,
        rolled_back,
    })
}

/// Publishes fireworks-app 1.1.7 in the test bed's repository: 1.1.6 and a ConfigMap whose name
/// the API server refuses, so that every upgrade to it is refused.
fn publish_bad_version(bed: &TestBed) -> Result<(), Error> {
    let work = bed.scratch("bad-chart");
    let (source, packaged_dir) = (work.join("source"), work.join("packaged"));
    std::fs::create_dir_all(&source)?;
    std::fs::create_dir_all(&packaged_dir)?;
    let run = |program: &str, args: &[&std::ffi::OsStr]| -> Result<(), Error> {
        let output = std::process::Command::new(program).args(args).output()?;
        match output.status.success() {
            true => Ok(()),
            false => Err(format!("{program}: {}", String::from_utf8_lossy(&output.stderr)).into()),
        }
    };
    let good = packaged(NEXT_VERSION)?;
    run(
        "tar",
        &[
            "-xzf".as_ref(),
            good.as_os_str(),
            "-C".as_ref(),
            source.as_os_str(),
        ],
    )?;
    let chart = source.join(CHART);
    let manifest = std::fs::read_to_string(chart.join("Chart.yaml"))?;
    let manifest = manifest.replace(
        &format!("version: {NEXT_VERSION}"),
        &format!("version: {BAD_VERSION}"),
    );
    std::fs::write(chart.join("Chart.yaml"), manifest)?;
    let refused = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: 'Not_A_Valid_Name'}\n";
    std::fs::write(chart.join("templates/refused.yaml"), refused)?;
    let helm = env("HELM_BIN")?;
    run(
        &helm,
        &[
            "package".as_ref(),
            chart.as_os_str(),
            "-d".as_ref(),
            packaged_dir.as_os_str(),
        ],
    )?;
    let repo = std::path::PathBuf::from(env("TESTBED_DIR")?).join("repo");
    let index = repo.join("index.yaml");
    let merge = [
        "repo".as_ref(),
        "index".as_ref(),
        packaged_dir.as_os_str(),
        "--merge".as_ref(),
        index.as_os_str(),
    ];
    run(&helm, &merge)?;
    let archive = format!("{CHART}-{BAD_VERSION}.tgz");
    std::fs::copy(packaged_dir.join(&archive), repo.join(&archive))?;
    std::fs::rename(packaged_dir.join("index.yaml"), index)?;
    Ok(())
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
