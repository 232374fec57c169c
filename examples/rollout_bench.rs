//! How fast one controller rolls compositions out to two clusters, against plain sequential
//! `helm install`s on both in the same run, and whether a dead cluster registered beside them
//! holds back compositions that do not target it.
//!
//! Runs against a fresh test bed (`make bench` starts one; see `bench_support` for what it reads)
//! and a second control plane the bench starts itself (`e2e/testbed.sh up --control-plane-only`
//! in its scratch folder; stopped at the end, whether the bench passed or not). That one is
//! registered as cluster `edge` by a Secret labelled `compositor.dev/cluster: "true"` in the
//! operator's namespace, which is also its `--clusters-namespace`. The Secret's kubeconfig
//! authenticates with the token of ServiceAccount `kube-system/compositor-installer` on `edge`,
//! bound to `cluster-admin`: an installer identity, not the admin's.
//!
//! - compositor: the operator applies the default Tenant definition's chart, cert-manager
//!   v1.19.1 (`testdata/real-charts`, published into the test bed's HTTP repository as a .tgz
//!   URL, basic auth through a Secret), as a `Tenant` placed `{clusters: AllClusters, namespace:
//!   CompositionName}`; its controller Deployment is run here as a kubelet would run it (its
//!   ServiceAccount's token, its arguments, `--workers 4`, an empty chart cache); once the API
//!   server takes writes of the new kind (printed apart: see `bench_support::warm_up`),
//!   `COUNT` compositions are created at once and timed until all are Ready on both clusters
//!   (`status.readyClusters` "2/2");
//! - baseline: `2 × COUNT` sequential `helm install --create-namespace` of the same archive with
//!   the same values, `COUNT` on the management cluster (admin credentials), then `COUNT` on
//!   `edge` (the registered identity), each release in a new namespace named after it, as the
//!   controller places them;
//! - dead cluster: `BATCH` compositions with `clusterRef: {name: local}` are created at once and
//!   timed until Ready, first with only the healthy clusters registered; then with a third
//!   cluster `dead` registered, on which each of the `COUNT` compositions above fails and is
//!   retried meanwhile: first a closed port on 127.0.0.1 (connections refused at once), then a
//!   port whose listener never accepts and whose backlog is full, so that connections get no
//!   answer and wait for the connect timeout (a host that is down, a firewall that drops). Before
//!   each timed batch the bench waits until all `COUNT` compositions report the dead cluster
//!   (at most `REPORT_LIMIT`, and prints how many did). Times are printed, not judged.
//!
//! Figures go to stdout (the dead-cluster rows as they come), progress to stderr; the exit code
//! is non-zero when a step fails or does not finish within its limit (`BATCH_LIMIT` for a batch
//! of local-only compositions, once the other batches have run).

mod bench_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::GroupVersionKind;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use bench_support::{
    Counts, Error, Process, Samples, TestBed, WORKERS, delta, describe, env, met, ratio, secs, sum,
    token, with_token,
};

/// Compositions placed on every cluster, and baseline releases per cluster.
const COUNT: usize = 20;
/// Compositions placed on `local` alone, per dead-cluster step.
const BATCH: usize = 10;
/// The definition.
const DEFINITION: &str = "fireworksapp";
/// The registered clusters' names: their Secrets'.
const EDGE: &str = "edge";
const DEAD: &str = "dead";
/// The ServiceAccount on `edge` whose token the registration holds.
const INSTALLER: &str = "compositor-installer";
/// The label that tells the bench's batches of compositions apart.
const BATCH_LABEL: &str = "bench.compositor.dev/batch";
/// How often compositions are polled while timed.
const POLL: Duration = Duration::from_millis(100);
/// How long the compositions placed on every cluster may take to become Ready.
const LIMIT: Duration = Duration::from_secs(600);
/// How long a batch of local-only compositions may take to become Ready (with healthy clusters,
/// a few seconds).
const BATCH_LIMIT: Duration = Duration::from_secs(180);
/// How long the compositions on every cluster are given to report the dead cluster.
const REPORT_LIMIT: Duration = Duration::from_secs(60);
/// The ratio compositor / baseline aimed at.
const GOAL: f64 = 1.15;

#[tokio::main]
async fn main() -> ExitCode {
    bench_support::main("rollout-bench", run).await
}

async fn run(bed: &TestBed) -> Result<(), Error> {
    let namespace = bed.namespace("rollout").await?;
    eprintln!("starting the second control plane");
    let remote = Remote::up(bed.scratch(EDGE)).await?;
    let edge = remote.installer_kubeconfig().await?;
    let registrations = Api::<Secret>::namespaced(bed.client.clone(), &namespace);
    register(&registrations, EDGE, &edge).await?;

    let group = format!("{namespace}.compositor.dev");
    let kubeconfig = PathBuf::from(env("KUBECONFIG")?);
    let clusters_namespace = ["--clusters-namespace", namespace.as_str()];
    let operator = bed
        .operator_with(
            &namespace,
            &bed.scratch("operator-cache"),
            "operator.log",
            &kubeconfig,
            &clusters_namespace,
        )
        .await?;
    wait_definition(bed, &operator, &namespace, &group).await?;
    let gvk = GroupVersionKind::gvk(&group, VERSION, KIND);
    let (mut controller, compositions) = bed
        .start_controller(&namespace, CONTROLLER, &gvk, PLURAL)
        .await?;
    let bench = Bench {
        bed,
        compositions,
        api_version: format!("{group}/{VERSION}"),
    };
    let sample = serde_json::from_value(json!({
        "apiVersion": bench.api_version, "kind": KIND,
        "metadata": {"name": "warm-up"}, "spec": values(),
    }))?;
    let served = bench_support::warm_up(&bench.compositions, &sample).await?;

    let everywhere = bench.names("app", COUNT);
    let rollout = bench
        .rollout(&everywhere, &mut controller)
        .await
        .map_err(|e| format!("the rollout to both clusters: {e}"))?;
    eprintln!(
        "compositor: {COUNT} compositions Ready on 2/2 clusters in {}",
        secs(rollout.all)
    );
    let edge_kubeconfig = bed.scratch("edge.kubeconfig");
    std::fs::write(&edge_kubeconfig, serde_json::to_string(&edge)?)?;
    let baseline = bench.baseline(&kubeconfig, &edge_kubeconfig).await?;
    eprintln!(
        "baseline: {} helm installs in {}",
        2 * COUNT,
        secs(baseline.local + baseline.edge)
    );
    print_rollout(served, &rollout, &baseline);

    // The dead-cluster rows are printed as they come; a batch that is not Ready in time fails
    // the bench once the other steps have run.
    print_dead_header();
    let healthy = bench.local_batch("healthy", &mut controller).await?;
    print_dead_row(&format!("local, {EDGE}"), &healthy, &healthy);
    let mut unfinished = Vec::new();
    if healthy.ready.is_err() {
        unfinished.push("with healthy clusters");
    }
    let closed = closed_port()?;
    register(&registrations, DEAD, &pointed_at(&edge, closed)).await?;
    let refused = bench.dead_step("refused", closed, &mut controller).await?;
    print_dead_row(
        &format!("local, {EDGE}, {DEAD} refusing connections"),
        &refused,
        &healthy,
    );
    if refused.ready.is_err() {
        unfinished.push("with a dead cluster refusing connections");
    }
    let silent = Silent::listen().await?;
    let rotate = json!({"stringData": {"kubeconfig": pointed_at(&edge, silent.port).to_string()}});
    registrations
        .patch(DEAD, &PatchParams::default(), &Patch::Merge(rotate))
        .await?;
    let dropped = bench
        .dead_step("dropped", silent.port, &mut controller)
        .await?;
    print_dead_row(
        &format!("local, {EDGE}, {DEAD} dropping connections"),
        &dropped,
        &healthy,
    );
    if dropped.ready.is_err() {
        unfinished.push("with a dead cluster dropping connections");
    }
    controller.alive()?;
    if !unfinished.is_empty() {
        return Err(controller.failure(&format!(
            "{BATCH} local-only compositions were not all Ready within {BATCH_LIMIT:?} {}",
            unfinished.join(", nor ")
        )));
    }
    Ok(())
}

/// The rollout's table.
fn print_rollout(served: Duration, rollout: &Rollout, baseline: &Baseline) {
    let baseline_all = baseline.local + baseline.edge;
    let compositor_ratio = ratio(rollout.all, baseline_all);
    println!(
        "\nRollout: {COUNT} Tenants (cert-manager v1.19.1) on 2 clusters (local, {EDGE}), \
         AllClusters + CompositionName, --workers {WORKERS}\n"
    );
    println!("| measurement | value |");
    println!("|---|---|");
    println!(
        "| the new kind's first write, a dry run (held once per CRD version; not timed) | {} |",
        secs(served)
    );
    println!(
        "| compositor: create {COUNT} at once → all Ready on 2/2 clusters | {} (creates took {}, \
         first Ready {}, median {}) |",
        secs(rollout.all),
        secs(rollout.created),
        secs(rollout.first),
        secs(rollout.median)
    );
    println!(
        "| baseline: {} sequential `helm install --create-namespace` ({COUNT} local, then \
         {COUNT} on {EDGE}) | {} ({} + {}) |",
        2 * COUNT,
        secs(baseline_all),
        secs(baseline.local),
        secs(baseline.edge)
    );
    println!(
        "| compositor / baseline (goal ≤ {GOAL}) | {compositor_ratio:.2} — goal {} |",
        met(compositor_ratio <= GOAL)
    );
    println!(
        "| Helm calls during the rollout | {} |",
        describe(&rollout.calls)
    );
    println!(
        "| reconciles during the rollout: count by outcome, time in them over {WORKERS} workers | \
         {}, {:.1} s |",
        describe(&rollout.reconciles),
        rollout.busy
    );
    println!(
        "| the controller's requests to the management API during the rollout, by verb | {} |",
        describe(&rollout.requests)
    );
}

/// The head of the dead-cluster table.
fn print_dead_header() {
    println!(
        "\nDead cluster: {BATCH} compositions with clusterRef local created at once → all Ready, \
         beside the {COUNT} placed on every cluster\n"
    );
    println!(
        "| registered clusters | the {COUNT} report `{DEAD}` | {BATCH} local-only Ready | / \
         healthy | reconciles meanwhile (failed) |"
    );
    println!("|---|---|---|---|---|");
}

/// One row of the dead-cluster table: `batch`, with `clusters` registered, against `healthy`.
fn print_dead_row(clusters: &str, batch: &Batch, healthy: &Batch) {
    let reported = match batch.reported {
        None => "—".to_string(),
        Some((count, at)) if count == COUNT => format!("after {}", secs(at)),
        Some((count, at)) => format!(
            "**{count} of {COUNT}** within {} (the last at {})",
            secs(REPORT_LIMIT),
            secs(at)
        ),
    };
    let (ready, against) = match (batch.ready, healthy.ready) {
        (Ok(ready), Ok(healthy)) => (secs(ready), format!("{:.2}", ratio(ready, healthy))),
        (Ok(ready), Err(_)) => (secs(ready), "—".to_string()),
        (Err(count), _) => (
            format!("**{count} of {BATCH}** within {}", secs(BATCH_LIMIT)),
            "—".to_string(),
        ),
    };
    println!(
        "| {clusters} | {reported} | {ready} | {against} | {} ({}) |",
        batch.reconciles, batch.failed
    );
}

/// The compositions and the test bed a step works with.
struct Bench<'a> {
    bed: &'a TestBed,
    compositions: Api<DynamicObject>,
    api_version: String,
}

/// When the compositions placed on every cluster became Ready on both, from the first create,
/// and the Helm calls on the way.
struct Rollout {
    created: Duration,
    first: Duration,
    median: Duration,
    all: Duration,
    calls: Counts,
    reconciles: Counts,
    /// Seconds spent in reconciles, summed over the workers.
    busy: f64,
    /// API requests by verb.
    requests: Counts,
}

/// The baseline's installs on each cluster.
struct Baseline {
    local: Duration,
    edge: Duration,
}

/// A batch of local-only compositions: how many of the compositions on every cluster reported
/// the dead cluster (as it was then) and when the last did, from its registration; when the
/// batch was Ready, and the reconciles (all, failed) meanwhile.
struct Batch {
    reported: Option<(usize, Duration)>,
    /// When the last was Ready, or how many were at `BATCH_LIMIT`.
    ready: Result<Duration, usize>,
    reconciles: f64,
    failed: f64,
}

impl Bench<'_> {
    /// `count` names unique in this run; each is a composition's, its release's and, on each
    /// cluster, its namespace's.
    fn names(&self, what: &str, count: usize) -> Vec<String> {
        (0..count).map(|_| self.bed.unique(what)).collect()
    }

    /// Creates a composition named `name` for each of `names` at once, with the values of
    /// [`values`] and `more` in its spec, labelled as batch `batch`; returns when the creates did.
    async fn create(&self, names: &[String], batch: &str, more: &Value) -> Result<(), Error> {
        let objects = names
            .iter()
            .map(|name| {
                let mut spec = values();
                if let (Some(spec), Some(more)) = (spec.as_object_mut(), more.as_object()) {
                    spec.extend(more.clone());
                }
                serde_json::from_value(json!({
                    "apiVersion": self.api_version, "kind": KIND,
                    "metadata": {"name": name, "labels": {BATCH_LABEL: batch}},
                    "spec": spec,
                }))
            })
            .collect::<Result<Vec<DynamicObject>, _>>()?;
        let params = PostParams::default();
        futures::future::try_join_all(objects.iter().map(|o| self.compositions.create(&params, o)))
            .await?;
        Ok(())
    }

    /// When each composition of batch `batch` was first seen `done` (given its status), from
    /// `start`, sorted; stops when `count` were, or at `limit` with those seen so far.
    async fn times(
        &self,
        batch: &str,
        count: usize,
        controller: &mut Process,
        (start, limit): (Instant, Duration),
        done: impl Fn(&Value) -> bool,
    ) -> Result<Vec<Duration>, Error> {
        let list = ListParams::default().labels(&format!("{BATCH_LABEL}={batch}"));
        let mut done_at = BTreeMap::new();
        while done_at.len() < count && start.elapsed() < limit {
            controller.alive()?;
            tokio::time::sleep(POLL).await;
            let now = start.elapsed();
            for object in self.compositions.list(&list).await?.items {
                if done(&object.data["status"]) {
                    done_at.entry(object.name_any()).or_insert(now);
                }
            }
        }
        let mut times: Vec<Duration> = done_at.into_values().collect();
        times.sort();
        Ok(times)
    }

    /// Creates `names`, placed on every cluster, at once and waits until each is Ready on both.
    async fn rollout(&self, names: &[String], controller: &mut Process) -> Result<Rollout, Error> {
        let before = controller.metrics(&self.bed.http).await?;
        let start = Instant::now();
        self.create(names, "everywhere", &json!({})).await?;
        let created = start.elapsed();
        let times = self
            .times("everywhere", COUNT, controller, (start, LIMIT), |status| {
                status["phase"] == "Ready" && status["readyClusters"] == "2/2"
            })
            .await?;
        if times.len() < COUNT {
            return Err(controller.failure(&format!(
                "{} of {COUNT} Ready on 2/2 clusters after {LIMIT:?}",
                times.len()
            )));
        }
        let after = controller.metrics(&self.bed.http).await?;
        Ok(Rollout {
            created,
            first: times[0],
            median: times[times.len() / 2],
            all: times[times.len() - 1],
            calls: delta(&helm_calls(&before), &helm_calls(&after)),
            reconciles: delta(&reconciles(&before), &reconciles(&after)),
            busy: busy(&after) - busy(&before),
            requests: delta(&requests(&before), &requests(&after)),
        })
    }

    /// `COUNT` sequential installs on the management cluster, then as many on `edge`, each
    /// release in a new namespace named after it.
    async fn baseline(&self, local: &Path, edge: &Path) -> Result<Baseline, Error> {
        let names = self.names("helm", COUNT);
        let chart = tenant_chart()?;
        let chart = chart.to_str().ok_or("chart path is not UTF-8")?;
        let mut took = Vec::new();
        for kubeconfig in [local, edge] {
            let start = Instant::now();
            for name in &names {
                let args = [
                    "install",
                    name,
                    chart,
                    "--namespace",
                    name,
                    "--create-namespace",
                ];
                self.bed.helm(kubeconfig, &args, &values()).await?;
            }
            took.push(start.elapsed());
        }
        Ok(Baseline {
            local: took[0],
            edge: took[1],
        })
    }

    /// Creates `BATCH` compositions placed on `local` alone, labelled `batch`, at once and
    /// times them until Ready, or `BATCH_LIMIT`, counting the controller's reconciles meanwhile.
    async fn local_batch(&self, batch: &str, controller: &mut Process) -> Result<Batch, Error> {
        let names = self.names(batch, BATCH);
        let before = reconciles(&controller.metrics(&self.bed.http).await?);
        let start = Instant::now();
        let local = json!({"clusterRef": {"name": "local"}});
        self.create(&names, batch, &local).await?;
        let times = self
            .times(batch, BATCH, controller, (start, BATCH_LIMIT), |status| {
                status["phase"] == "Ready" && status["readyClusters"] == "1/1"
            })
            .await?;
        let after = reconciles(&controller.metrics(&self.bed.http).await?);
        let changed = delta(&before, &after);
        Ok(Batch {
            reported: None,
            ready: match times.last() {
                Some(&last) if times.len() == BATCH => Ok(last),
                _ => Err(times.len()),
            },
            reconciles: sum(&changed),
            failed: changed
                .get(&vec!["Error".to_string()])
                .copied()
                .unwrap_or(0.0),
        })
    }

    /// With cluster `dead` (just registered, or rotated) at `127.0.0.1:port`: waits until every
    /// composition placed on every cluster reports it failed there, or `REPORT_LIMIT`, then
    /// times a batch of local-only compositions.
    async fn dead_step(
        &self,
        batch: &str,
        port: u16,
        controller: &mut Process,
    ) -> Result<Batch, Error> {
        let server = format!("127.0.0.1:{port}");
        let timing = (Instant::now(), REPORT_LIMIT);
        let reported = self
            .times("everywhere", COUNT, controller, timing, |status| {
                failed_at(status, DEAD, &server)
            })
            .await?;
        let last = reported.last().copied().unwrap_or(REPORT_LIMIT);
        let batch = self.local_batch(batch, controller).await?;
        Ok(Batch {
            reported: Some((reported.len(), last)),
            ..batch
        })
    }
}

/// Whether `status` has cluster `cluster` Failed, with a message naming `server`.
fn failed_at(status: &Value, cluster: &str, server: &str) -> bool {
    status["clusters"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|entry| {
            entry["name"] == cluster
                && entry["phase"] == "Failed"
                && entry["message"]
                    .as_str()
                    .is_some_and(|message| message.contains(server))
        })
}

/// The values every composition and baseline release gets: cert-manager's post-install check
/// waits for pods, which no kubelet here runs.
fn values() -> Value {
    json!({"startupapicheck": {"enabled": false}})
}

/// The chart rolled out: the default Tenant definition's, cert-manager v1.19.1.
const TENANT_ARCHIVE: &str = "cert-manager-v1.19.1.tgz";
/// What its definition generates: the CRD version, kind and plural, and the controller.
const VERSION: &str = "v1-19-1";
const KIND: &str = "Tenant";
const PLURAL: &str = "tenants";
const CONTROLLER: &str = "tenants-v1-19-1-controller";

/// The cert-manager archive of `testdata/real-charts`.
fn tenant_chart() -> Result<PathBuf, Error> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/real-charts")
        .join(TENANT_ARCHIVE);
    if !path.is_file() {
        return Err(format!("{} is missing", path.display()).into());
    }
    Ok(path)
}

/// Publishes the Tenant chart into the test bed's HTTP repository; its URL there.
fn publish_tenant_chart() -> Result<String, Error> {
    let folder = Path::new(&env("TESTBED_DIR")?).join("repo/real");
    std::fs::create_dir_all(&folder)?;
    std::fs::copy(tenant_chart()?, folder.join(TENANT_ARCHIVE))?;
    Ok(format!(
        "{}/real/{TENANT_ARCHIVE}",
        env("COMPOSITOR_TEST_REPO_URL")?
    ))
}

/// Helm calls so far, by verb and outcome.
fn helm_calls(metrics: &Samples) -> Counts {
    metrics.by("compositor_helm_calls_total", &["verb", "outcome"])
}

/// Seconds spent in reconciles so far.
fn busy(metrics: &Samples) -> f64 {
    metrics.total("compositor_reconcile_duration_seconds_sum")
}

/// API requests so far, by verb.
fn requests(metrics: &Samples) -> Counts {
    metrics.by("compositor_api_requests_total", &["verb"])
}

/// Reconciles so far, by outcome.
fn reconciles(metrics: &Samples) -> Counts {
    metrics.by("compositor_reconciles_total", &["outcome"])
}

/// Applies the Tenant definition (cert-manager) with CRD group `group` in `namespace`, placed on
/// every cluster in a namespace named after each composition, and waits until it is Ready.
async fn wait_definition(
    bed: &TestBed,
    operator: &Process,
    namespace: &str,
    group: &str,
) -> Result<(), Error> {
    let spec = json!({
        "chart": {
            "url": publish_tenant_chart()?,
            "credentials": {"username": env("COMPOSITOR_TEST_REPO_USERNAME")?,
                            "passwordRef": {"name": "repo-password", "key": "password"}},
        },
        "placement": {"clusters": "AllClusters", "namespace": "CompositionName"},
    });
    bed.apply_definition_with(
        namespace,
        DEFINITION,
        json!({"group": group, "kind": KIND}),
        "",
        spec,
    )
    .await?;
    bench_support::wait_definition(bed, operator, namespace, DEFINITION).await
}

/// Registers cluster `name` with a Secret holding `kubeconfig`.
async fn register(secrets: &Api<Secret>, name: &str, kubeconfig: &Value) -> Result<(), Error> {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"compositor.dev/cluster": "true"}},
        "stringData": {"kubeconfig": kubeconfig.to_string()},
    }))?;
    secrets.create(&PostParams::default(), &secret).await?;
    Ok(())
}

/// `kubeconfig` with its API server at `127.0.0.1:port`.
fn pointed_at(kubeconfig: &Value, port: u16) -> Value {
    let mut kubeconfig = kubeconfig.clone();
    kubeconfig["clusters"][0]["cluster"]["server"] = json!(format!("https://127.0.0.1:{port}"));
    kubeconfig
}

/// A port on 127.0.0.1 nothing listens on (it was free a moment ago).
fn closed_port() -> Result<u16, Error> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A port on 127.0.0.1 whose listener never accepts and whose backlog (0) is filled at once, so
/// the kernel drops further connection attempts unanswered; open while this lives.
struct Silent {
    port: u16,
    _listener: tokio::net::TcpListener,
    _held: Vec<tokio::net::TcpStream>,
}

impl Silent {
    async fn listen() -> Result<Silent, Error> {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind("127.0.0.1:0".parse()?)?;
        let listener = socket.listen(0)?;
        let address = listener.local_addr()?;
        let mut held = Vec::new();
        // The first connection fills the backlog; the one that gets no answer proves it.
        loop {
            let attempt = tokio::net::TcpStream::connect(address);
            match tokio::time::timeout(Duration::from_millis(500), attempt).await {
                Ok(stream) if held.len() < 8 => held.push(stream?),
                Ok(_) => return Err("the silent listener's backlog never filled".into()),
                Err(_) => break,
            }
        }
        Ok(Silent {
            port: address.port(),
            _listener: listener,
            _held: held,
        })
    }
}

/// The second control plane: `e2e/testbed.sh up --control-plane-only` in `dir`, stopped by
/// `e2e/testbed.sh down` when dropped, whether the bench passed or not.
struct Remote {
    dir: PathBuf,
}

impl Remote {
    async fn up(dir: PathBuf) -> Result<Remote, Error> {
        std::fs::create_dir_all(&dir)?;
        // Made first, so that what a failed start leaves running is stopped too.
        let remote = Remote { dir };
        let output = tokio::process::Command::new(script())
            .args(["up", "--control-plane-only"])
            .env("TESTBED_DIR", &remote.dir)
            .stdin(Stdio::null())
            .output()
            .await?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            return Err(
                format!("the second control plane did not start:\n{}", stderr.trim()).into(),
            );
        }
        Ok(remote)
    }

    /// A kubeconfig for it authenticating as ServiceAccount `kube-system/INSTALLER`, bound to
    /// `cluster-admin` here.
    async fn installer_kubeconfig(&self) -> Result<Value, Error> {
        let admin = std::fs::read_to_string(self.dir.join("kubeconfig"))?;
        let kubeconfig: Kubeconfig = serde_json::from_value(serde_saphyr::from_str(&admin)?)?;
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
        let client = Client::try_from(config)?;
        let account: ServiceAccount =
            serde_json::from_value(json!({"metadata": {"name": INSTALLER}}))?;
        Api::<ServiceAccount>::namespaced(client.clone(), "kube-system")
            .create(&PostParams::default(), &account)
            .await?;
        let binding: ClusterRoleBinding = serde_json::from_value(json!({
            "metadata": {"name": INSTALLER},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": INSTALLER, "namespace": "kube-system"}],
        }))?;
        Api::<ClusterRoleBinding>::all(client.clone())
            .create(&PostParams::default(), &binding)
            .await?;
        with_token(&admin, &token(&client, "kube-system", INSTALLER).await?)
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        let stopped = std::process::Command::new(script())
            .arg("down")
            .env("TESTBED_DIR", &self.dir)
            .stdin(Stdio::null())
            .output();
        match stopped {
            Ok(output) if output.status.success() => {}
            Ok(output) => eprintln!(
                "stopping the second control plane failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ),
            Err(error) => eprintln!("stopping the second control plane failed: {error}"),
        }
    }
}

/// The test bed script.
fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/testbed.sh")
}
