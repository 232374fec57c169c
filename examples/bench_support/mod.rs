//! What the test bed benchmarks share: the test bed's environment and admin client, compositor
//! processes (the operator, and a controller run as its Deployment would run) with their logs and
//! metrics, the fireworks-app definition, and how figures are summarised.
//!
//! Every bench reads `KUBECONFIG`, `HELM_BIN`, `COMPOSITOR_TEST_REPO_URL`,
//! `COMPOSITOR_TEST_REPO_USERNAME`, `COMPOSITOR_TEST_REPO_PASSWORD` and `COMPOSITOR_TEST_CHARTS`
//! from the test bed (`e2e/with-testbed.sh` exports them); the compositor binary is
//! `COMPOSITOR_BIN`, else `target/release/compositor`. Logs, caches and kubeconfigs go to a scratch
//! folder that is removed after a success and kept after a failure.

// Each bench uses part of this module.
#![allow(dead_code)]

pub mod proxy;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, CustomResourceExt, ResourceExt};
use serde_json::{Value, json};

use compositor::api::{CompositionDefinition, find_condition};

pub type Error = Box<dyn std::error::Error>;

/// The chart every definition uses, from the test bed's HTTP repository.
pub const CHART: &str = "fireworks-app";
pub const CHART_VERSION: &str = "1.1.5";
/// What the definition of that chart generates: its CRD version, kind and plural, and its
/// controller Deployment.
pub const VERSION: &str = "v1-1-5";
pub const KIND: &str = "FireworksApp";
pub const PLURAL: &str = "fireworksapps";
pub const CONTROLLER: &str = "fireworksapps-v1-1-5-controller";
/// The controllers' `--workers` in every bench.
pub const WORKERS: &str = "4";
/// The controllers' `--resync-seconds` in every bench: longer than any bench runs, so that no
/// periodic resync falls into what a bench measures. With the default (300 s) an apply of 1,000
/// compositions that takes longer than that is followed by a resync of every composition in
/// turn, and the controller is never idle; a bench that wants a resync makes one on demand.
pub const RESYNC_SECONDS: &str = "3600";
/// How long a definition may take to become Ready.
pub const DEFINITION_LIMIT: Duration = Duration::from_secs(180);
/// The field manager of the benches' own writes.
const MANAGER: &str = "compositor-bench";
/// How often compositions are polled while timed.
const POLL: Duration = Duration::from_millis(100);
/// How long a compositor process may take to answer `/readyz`.
const START_LIMIT: Duration = Duration::from_secs(60);

/// A test bed variable.
pub fn env(name: &str) -> Result<String, Error> {
    std::env::var(name).map_err(|_| {
        format!("{name} is not set: run through `make bench` (or `e2e/with-testbed.sh`)").into()
    })
}

/// Runs a bench against the test bed: prints its error and keeps its scratch folder on failure.
pub async fn main(name: &str, bench: impl AsyncFnOnce(&TestBed) -> Result<(), Error>) -> ExitCode {
    let bed = match TestBed::new(name).await {
        Ok(bed) => bed,
        Err(error) => {
            eprintln!("{name} failed: {error}");
            return ExitCode::FAILURE;
        }
    };
    match bench(&bed).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let kept = bed.scratch.keep();
            eprintln!("{name} failed: {error}\n(logs kept in {})", kept.display());
            ExitCode::FAILURE
        }
    }
}

/// The test bed and what every phase of a bench shares.
pub struct TestBed {
    /// The admin client.
    pub client: Client,
    /// For the metrics and health endpoints.
    pub http: reqwest::Client,
    /// The compositor binary.
    pub binary: PathBuf,
    /// The packaged chart.
    pub chart: PathBuf,
    prefix: String,
    next: AtomicUsize,
    scratch: tempfile::TempDir,
}

impl TestBed {
    /// Connects to the test bed and installs compositor's own CRDs, as its Helm chart does.
    async fn new(name: &str) -> Result<Self, Error> {
        compositor::runtime::init_tls();
        env("KUBECONFIG")?;
        env("HELM_BIN")?;
        let binary = std::env::var_os("COMPOSITOR_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/compositor")
            });
        if !binary.exists() {
            return Err(format!("{} is missing: build it first", binary.display()).into());
        }
        let bed = TestBed {
            client: Client::try_default().await?,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()?,
            binary,
            chart: packaged(CHART_VERSION)?,
            prefix: format!("{name}-{}", std::process::id()),
            next: AtomicUsize::new(0),
            scratch: tempfile::Builder::new()
                .prefix(&format!("{name}."))
                .tempdir()?,
        };
        bed.apply_established(&CompositionDefinition::crd(), START_LIMIT)
            .await?;
        Ok(bed)
    }

    /// A name unique within this run, valid as a DNS-1123 label.
    pub fn unique(&self, what: &str) -> String {
        let next = self.next.fetch_add(1, Ordering::Relaxed);
        format!("{}-{what}-{next}", self.prefix)
    }

    /// A path in the scratch folder.
    pub fn scratch(&self, name: &str) -> PathBuf {
        self.scratch.path().join(name)
    }

    /// Applies `crd` and waits until it is Established; the time that took.
    pub async fn apply_established(
        &self,
        crd: &CustomResourceDefinition,
        limit: Duration,
    ) -> Result<Duration, Error> {
        let crds = Api::<CustomResourceDefinition>::all(self.client.clone());
        let name = crd.name_any();
        let start = Instant::now();
        crds.patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(crd),
        )
        .await?;
        while !established(&crds.get(&name).await?) {
            if start.elapsed() > limit {
                return Err(format!("CRD {name} was not Established after {limit:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        Ok(start.elapsed())
    }

    /// A new namespace holding the chart repository's password in Secret `repo-password`.
    pub async fn namespace(&self, what: &str) -> Result<String, Error> {
        let name = self.unique(what);
        let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &namespace)
            .await?;
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "repo-password"},
            "stringData": {"password": env("COMPOSITOR_TEST_REPO_PASSWORD")?},
        }))?;
        Api::<Secret>::namespaced(self.client.clone(), &name)
            .create(&PostParams::default(), &secret)
            .await?;
        Ok(name)
    }

    /// Applies definition `name` of fireworks-app `version` in `namespace` with `names` (the CRD
    /// group, and the plural where two definitions share a namespace).
    pub async fn apply_definition(
        &self,
        namespace: &str,
        name: &str,
        names: Value,
        version: &str,
    ) -> Result<CompositionDefinition, Error> {
        self.apply_definition_with(namespace, name, names, version, json!({}))
            .await
    }

    /// `apply_definition` with more fields of the spec (`placement`, say) from object `more`.
    pub async fn apply_definition_with(
        &self,
        namespace: &str,
        name: &str,
        names: Value,
        version: &str,
        more: Value,
    ) -> Result<CompositionDefinition, Error> {
        let mut spec = json!({
            "chart": {
                "url": env("COMPOSITOR_TEST_REPO_URL")?,
                "repo": CHART, "version": version,
                "credentials": {"username": env("COMPOSITOR_TEST_REPO_USERNAME")?,
                                "passwordRef": {"name": "repo-password", "key": "password"}},
            },
            "names": names,
            // The bench's node, if any, has no image of its charts.
            "health": {"mode": "Ignore"},
        });
        if let (Some(spec), Value::Object(more)) = (spec.as_object_mut(), more) {
            spec.extend(more);
        }
        let definition = json!({
            "apiVersion": "compositor.dev/v1alpha1", "kind": "CompositionDefinition",
            "metadata": {"name": name},
            "spec": spec,
        });
        Ok(
            Api::<CompositionDefinition>::namespaced(self.client.clone(), namespace)
                .patch(
                    name,
                    &PatchParams::apply(MANAGER).force(),
                    &Patch::Apply(&definition),
                )
                .await?,
        )
    }

    /// Starts the operator for `namespace` with chart cache `cache`, logging to `log` in the
    /// scratch folder; returns once its `/readyz` answers.
    pub async fn operator(
        &self,
        namespace: &str,
        cache: &Path,
        log: &str,
    ) -> Result<Process, Error> {
        let kubeconfig = PathBuf::from(env("KUBECONFIG")?);
        self.operator_with(namespace, cache, log, &kubeconfig, &[])
            .await
    }

    /// `operator` with `kubeconfig` and `extra` arguments.
    pub async fn operator_with(
        &self,
        namespace: &str,
        cache: &Path,
        log: &str,
        kubeconfig: &Path,
        extra: &[&str],
    ) -> Result<Process, Error> {
        let mut args = vec![
            "run",
            "--namespace",
            namespace,
            "--cache-dir",
            cache.to_str().ok_or("cache path is not UTF-8")?,
            "--controller-image",
            "compositor:bench",
        ];
        args.extend(extra);
        let mut operator = Process::spawn(
            "operator",
            &self.binary,
            &args.into_iter().map(String::from).collect::<Vec<_>>(),
            &[("KUBECONFIG", kubeconfig.to_string_lossy().into_owned())],
            self.scratch(log),
        )?;
        operator.wait_ready(&self.http).await?;
        Ok(operator)
    }

    /// A namespace of its own for `what`, the operator for it, a definition of fireworks-app
    /// [`CHART_VERSION`] named `definition` there with `spec` (and a group of the namespace's
    /// name), once Ready, and its controller running.
    pub async fn served(&self, what: &str, definition: &str, spec: Value) -> Result<Served, Error> {
        let namespace = self.namespace(what).await?;
        let group = format!("{namespace}.compositor.dev");
        let cache = self.scratch("operator-cache");
        let operator = self.operator(&namespace, &cache, "operator.log").await?;
        let names = json!({"group": group});
        self.apply_definition_with(&namespace, definition, names, CHART_VERSION, spec)
            .await?;
        wait_definition(self, &operator, &namespace, definition).await?;
        let gvk = kube::core::GroupVersionKind::gvk(&group, VERSION, KIND);
        let (controller, compositions) = self
            .start_controller(&namespace, CONTROLLER, &gvk, PLURAL)
            .await?;
        Ok(Served {
            namespace,
            group,
            operator,
            controller,
            compositions,
        })
    }

    /// Runs `controller`, the Deployment in `namespace` of the definition version serving
    /// `gvk` (plural `plural`), as [`TestBed::run_deployment`] does, with `--workers`
    /// [`WORKERS`], `--resync-seconds` [`RESYNC_SECONDS`] and an empty chart cache; and the API
    /// of its compositions in `namespace`.
    pub async fn start_controller(
        &self,
        namespace: &str,
        controller: &str,
        gvk: &kube::core::GroupVersionKind,
        plural: &str,
    ) -> Result<(Process, Api<DynamicObject>), Error> {
        let cache = self.scratch("controller-cache");
        let cache = cache.to_str().ok_or("cache path is not UTF-8")?;
        let extra = [
            "--workers",
            WORKERS,
            "--resync-seconds",
            RESYNC_SECONDS,
            "--cache-dir",
            cache,
        ];
        let controller = self.run_deployment(namespace, controller, &extra).await?;
        let resource = kube::core::ApiResource::from_gvk_with_plural(gvk, plural);
        let compositions = Api::namespaced_with(self.client.clone(), namespace, &resource);
        Ok((controller, compositions))
    }

    /// Runs controller Deployment `name` of `namespace` as a kubelet would: its arguments, plus
    /// `extra`, with a token of its ServiceAccount in a kubeconfig of its own (so it has exactly
    /// the RBAC the operator gave it); returns once its `/readyz` answers.
    pub async fn run_deployment(
        &self,
        namespace: &str,
        name: &str,
        extra: &[&str],
    ) -> Result<Process, Error> {
        let deployment = Api::<Deployment>::namespaced(self.client.clone(), namespace)
            .get(name)
            .await?;
        let pod = deployment
            .spec
            .and_then(|spec| spec.template.spec)
            .ok_or("the controller Deployment has no pod spec")?;
        let container = pod
            .containers
            .first()
            .ok_or("the controller Deployment has no container")?;
        let service_account = pod
            .service_account_name
            .as_deref()
            .ok_or("the controller Deployment has no ServiceAccount")?;
        let kubeconfig = self.scratch(&format!("{name}.kubeconfig"));
        let token = self.token(namespace, service_account).await?;
        write_kubeconfig_with_token(&kubeconfig, &token)?;

        let mut args = container.args.clone().unwrap_or_default();
        args.extend(extra.iter().map(|arg| arg.to_string()));
        let mut controller = Process::spawn(
            "controller",
            &self.binary,
            &args,
            &[
                ("KUBECONFIG", kubeconfig.to_string_lossy().into_owned()),
                ("POD_NAME", name.to_string()),
            ],
            self.scratch(&format!("{name}.log")),
        )?;
        controller.wait_ready(&self.http).await?;
        Ok(controller)
    }

    /// A one-hour token of ServiceAccount `name` in `namespace`.
    async fn token(&self, namespace: &str, name: &str) -> Result<String, Error> {
        token(&self.client, namespace, name).await
    }

    /// Runs `helm VERB NAME CHART --namespace NAMESPACE --values …` for each name, `at_once` at
    /// a time (1: in turn), with `values(name)`, the admin credentials and Helm homes of its
    /// own; the total time.
    pub async fn helm_each(
        &self,
        verb: &str,
        namespace: &str,
        names: &[String],
        chart: &Path,
        values: impl Fn(&str) -> Value,
        at_once: usize,
    ) -> Result<Duration, Error> {
        let kubeconfig = PathBuf::from(env("KUBECONFIG")?);
        let chart = chart.to_str().ok_or("chart path is not UTF-8")?;
        let start = Instant::now();
        let (kubeconfig, values) = (&kubeconfig, &values);
        futures::stream::iter(names)
            .map(|name| async move {
                let args = [verb, name, chart, "--namespace", namespace];
                self.helm(kubeconfig, &args, &values(name)).await
            })
            .buffer_unordered(at_once.max(1))
            .try_collect::<Vec<()>>()
            .await?;
        Ok(start.elapsed())
    }

    /// Runs `helm ARGS… --values FILE` against the cluster of `kubeconfig`, with Helm homes of
    /// its own and `values` written to FILE; fails with Helm's stderr.
    pub async fn helm(
        &self,
        kubeconfig: &Path,
        args: &[&str],
        values: &Value,
    ) -> Result<(), Error> {
        let home = self.scratch("helm");
        let values_dir = self.scratch("values");
        std::fs::create_dir_all(&values_dir)?;
        let file = self.next.fetch_add(1, Ordering::Relaxed);
        let values_file = values_dir.join(format!("{file}.json"));
        std::fs::write(&values_file, values.to_string())?;
        let output = tokio::process::Command::new(env("HELM_BIN")?)
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_DATA_HOME", home.join("data"))
            .env("KUBECONFIG", kubeconfig)
            .args(args)
            .arg("--values")
            .arg(&values_file)
            .stdin(Stdio::null())
            .output()
            .await?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let call = args.iter().take(2).copied().collect::<Vec<_>>().join(" ");
            return Err(format!("helm {call} failed: {}", stderr.trim()).into());
        }
        Ok(())
    }
}

/// How many compositions a bench makes: `BENCH_SCALE` when set and not empty, else `default`.
pub fn scale(default: usize) -> Result<usize, Error> {
    match std::env::var("BENCH_SCALE") {
        Ok(scale) if !scale.is_empty() => Ok(scale
            .parse()
            .map_err(|_| format!("BENCH_SCALE={scale:?} is not a number"))?),
        _ => Ok(default),
    }
}

/// The test bed's packaged fireworks-app `version`.
pub fn packaged(version: &str) -> Result<PathBuf, Error> {
    let chart = Path::new(&env("COMPOSITOR_TEST_CHARTS")?).join(format!("{CHART}-{version}.tgz"));
    if !chart.exists() {
        return Err(format!("test chart {} is missing", chart.display()).into());
    }
    Ok(chart)
}

/// When each of `count` compositions was first seen `done` (given its status), from `start`,
/// sorted; fails after `limit`, with the conditions of those seen Failed on the way.
pub async fn times_until(
    compositions: &Api<DynamicObject>,
    count: usize,
    controller: &mut Process,
    start: Instant,
    limit: Duration,
    done: impl Fn(&Value) -> bool,
) -> Result<Vec<Duration>, Error> {
    let mut done_at: BTreeMap<String, Duration> = BTreeMap::new();
    let mut failed: BTreeMap<String, Value> = BTreeMap::new();
    while done_at.len() < count {
        controller.alive()?;
        if start.elapsed() > limit {
            return Err(controller.failure(&format!(
                "{} of {count} compositions done after {limit:?}; failed on the way: {failed:?}",
                done_at.len()
            )));
        }
        // Listing thousands of objects ten times a second would load the API server the
        // controller is measured against.
        tokio::time::sleep(POLL * (count / 50).clamp(1, 20) as u32).await;
        let now = start.elapsed();
        for object in compositions.list(&ListParams::default()).await?.items {
            let status = &object.data["status"];
            if done(status) {
                done_at.entry(object.name_any()).or_insert(now);
            } else if status["phase"] == "Failed" {
                failed.insert(object.name_any(), status["conditions"].clone());
            }
        }
    }
    let mut times: Vec<Duration> = done_at.into_values().collect();
    times.sort();
    Ok(times)
}

/// A one-hour token of ServiceAccount `name` in `namespace` of `client`'s cluster.
pub async fn token(client: &Client, namespace: &str, name: &str) -> Result<String, Error> {
    let request: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}}))?;
    Ok(Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create_token_request(name, &PostParams::default(), &request)
        .await?
        .status
        .ok_or("no token in the TokenRequest")?
        .token)
}

/// The admin kubeconfig with `token` as its only user, written to `path`.
fn write_kubeconfig_with_token(path: &Path, token: &str) -> Result<(), Error> {
    let admin = std::fs::read_to_string(env("KUBECONFIG")?)?;
    std::fs::write(path, serde_json::to_string(&with_token(&admin, token)?)?)?;
    Ok(())
}

/// Kubeconfig `kubeconfig` (YAML, one context) with `token` as its only user.
pub fn with_token(kubeconfig: &str, token: &str) -> Result<Value, Error> {
    let mut kubeconfig: Value = serde_saphyr::from_str(kubeconfig)?;
    let context_user = kubeconfig["contexts"][0]["context"]["user"].clone();
    kubeconfig["users"] = json!([{"name": context_user, "user": {"token": token}}]);
    Ok(kubeconfig)
}

/// Whether `crd` is Established.
pub fn established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

/// Whether `definition` has condition Ready True.
pub fn definition_ready(definition: &CompositionDefinition) -> bool {
    definition.status.as_ref().is_some_and(|status| {
        find_condition(&status.conditions, "Ready").is_some_and(|c| c.status == "True")
    })
}

/// A process's resident memory, in MiB.
#[derive(Clone, Copy, Debug)]
pub struct Memory {
    /// VmRSS: resident now.
    pub rss: f64,
    /// VmHWM: the most ever resident.
    pub hwm: f64,
    /// RssAnon: of `rss`, the heap and stacks.
    pub anon: f64,
    /// RssFile: of `rss`, mapped files, above all the binary's own code.
    pub file: f64,
    /// VmRSS of its running children: the resident Helm engine, while it runs.
    pub engine: f64,
}

/// How often [`Process::watch_peak`] samples.
const PEAK_EVERY: Duration = Duration::from_millis(100);

/// The most resident memory (MiB) a process and its running children held while watched.
#[derive(Clone, Copy, Debug, Default)]
pub struct Peak {
    /// The largest sum of the running children's VmRSS in one sample.
    pub children: f64,
    /// How many children were running in that sample.
    pub processes: usize,
    /// The process's own largest VmRSS.
    pub itself: f64,
    /// How many samples were taken.
    pub samples: usize,
}

/// A running [`Process::watch_peak`]; stops sampling when stopped or dropped.
pub struct PeakWatch {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Peak>>,
}

impl PeakWatch {
    /// Stops sampling; the peaks seen.
    pub fn stop(mut self) -> Peak {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|thread| thread.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for PeakWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// VmRSS of process `pid` in MiB, if it is still running.
fn vm_rss(pid: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))?;
    Some(kib.trim().strip_suffix("kB")?.trim().parse::<f64>().ok()? / 1024.0)
}

/// The sum of the VmRSS (MiB) of `pid`'s running children, and how many were counted (a child
/// that exits between the listing and the reading is left out).
fn children_rss(pid: &str) -> (f64, usize) {
    running_children(pid)
        .iter()
        .filter_map(|child| vm_rss(child))
        .fold((0.0, 0), |(total, n), mib| (total + mib, n + 1))
}

/// A compositor process with its output in a log file; stopped when dropped.
pub struct Process {
    what: &'static str,
    child: Child,
    log: PathBuf,
    address: Option<String>,
}

impl Process {
    /// Starts `binary ARGS… --log-format json --metrics-address 127.0.0.1:0` with `HELM_BIN` and
    /// `envs`.
    fn spawn(
        what: &'static str,
        binary: &Path,
        args: &[String],
        envs: &[(&str, String)],
        log: PathBuf,
    ) -> Result<Self, Error> {
        let out = std::fs::File::create(&log)?;
        let child = Command::new(binary)
            .args(args)
            .args(["--log-format", "json", "--metrics-address", "127.0.0.1:0"])
            .env("HELM_BIN", env("HELM_BIN")?)
            .envs(envs.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .map_err(|e| format!("starting the {what} ({}): {e}", binary.display()))?;
        Ok(Process {
            what,
            child,
            log,
            address: None,
        })
    }

    /// An error saying `what`, with the end of the process's log.
    pub fn failure(&self, what: &str) -> Error {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(30)..].join("\n");
        format!("{what}; {} log {}:\n{tail}", self.what, self.log.display()).into()
    }

    /// Fails when the process has exited.
    pub fn alive(&mut self) -> Result<(), Error> {
        match self.child.try_wait()? {
            Some(status) => Err(self.failure(&format!("the {} exited ({status})", self.what))),
            None => Ok(()),
        }
    }

    /// The metrics address the process logged (line "serving metrics and health").
    fn logged_address(&self) -> Option<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .find(|line| line["message"] == "serving metrics and health")
            .and_then(|line| line["address"].as_str().map(str::to_string))
    }

    /// Waits until the process has logged its metrics address and its `/readyz` answers 200.
    async fn wait_ready(&mut self, http: &reqwest::Client) -> Result<(), Error> {
        let start = Instant::now();
        loop {
            self.alive()?;
            if self.address.is_none() {
                self.address = self.logged_address();
            }
            if let Some(address) = &self.address
                && let Ok(response) = http.get(format!("http://{address}/readyz")).send().await
                && response.status().is_success()
            {
                return Ok(());
            }
            if start.elapsed() > START_LIMIT {
                return Err(self.failure(&format!("not ready after {START_LIMIT:?}")));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The process's metrics.
    pub async fn metrics(&self, http: &reqwest::Client) -> Result<Samples, Error> {
        let address = self.address.as_ref().ok_or("the process is not ready")?;
        let text = http
            .get(format!("http://{address}/metrics"))
            .send()
            .await?
            .error_for_status()?
            .text()
            .await?;
        Ok(Samples::parse(&text))
    }

    /// CPU seconds the process and the children it has waited for (its Helm processes) used.
    pub fn cpu(&self) -> Result<f64, Error> {
        let (itself, children) = self.cpu_split()?;
        Ok(itself + children)
    }

    /// CPU seconds the process used itself, and those its children used: the finished ones
    /// (Helm processes, with theirs) and the running ones (the resident Helm engine, with the
    /// post-renderers it ran).
    pub fn cpu_split(&self) -> Result<(f64, f64), Error> {
        let pid = self.child.id().to_string();
        // utime and stime; cutime and cstime.
        let running = running_children(&pid)
            .iter()
            .map(|child| cpu_seconds(child))
            .sum::<Result<f64, _>>()?;
        Ok((
            stat_seconds(&pid, 14..16)?,
            stat_seconds(&pid, 16..18)? + running,
        ))
    }

    /// The process's resident memory, from `/proc`.
    pub fn memory(&self) -> Result<Memory, Error> {
        let path = format!("/proc/{}/status", self.child.id());
        let status = std::fs::read_to_string(&path)?;
        let mib = |field: &str| -> Result<f64, Error> {
            let kib: f64 = status
                .lines()
                .find_map(|line| line.strip_prefix(field)?.trim().strip_suffix("kB"))
                .and_then(|value| value.trim().parse().ok())
                .ok_or_else(|| format!("no {field} in {path}"))?;
            Ok(kib / 1024.0)
        };
        Ok(Memory {
            engine: children_rss(&self.child.id().to_string()).0,
            rss: mib("VmRSS:")?,
            hwm: mib("VmHWM:")?,
            anon: mib("RssAnon:")?,
            file: mib("RssFile:")?,
        })
    }

    /// Starts sampling, every [`PEAK_EVERY`] until the returned watch is stopped, the process's
    /// VmRSS and the sum of its running children's (the resident Helm engines, and any `helm`
    /// process running at the moment), keeping the most of each: what a one-off reading after
    /// the fact misses, since engines come and go.
    pub fn watch_peak(&self) -> PeakWatch {
        let pid = self.child.id().to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut peak = Peak::default();
            while !stopped.load(Ordering::Relaxed) {
                let (children, processes) = children_rss(&pid);
                if children > peak.children {
                    (peak.children, peak.processes) = (children, processes);
                }
                peak.itself = peak.itself.max(vm_rss(&pid).unwrap_or(0.0));
                peak.samples += 1;
                std::thread::sleep(PEAK_EVERY);
            }
            peak
        });
        PeakWatch {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the process as a kubelet would: SIGTERM, then SIGKILL after 10 s.
    pub fn stop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One scrape of a Prometheus text exposition: series (name and labels as exposed) → value.
pub struct Samples(BTreeMap<String, f64>);

/// Counts keyed by the values of some labels.
pub type Counts = BTreeMap<Vec<String>, f64>;

impl Samples {
    fn parse(text: &str) -> Self {
        Samples(
            text.lines()
                .filter(|line| !line.starts_with('#'))
                .filter_map(|line| {
                    let (series, value) = line.rsplit_once(' ')?;
                    Some((series.to_string(), value.parse().ok()?))
                })
                .collect(),
        )
    }

    /// Metric `name` summed by the values of `labels` (a missing label counts as empty).
    pub fn by(&self, name: &str, labels: &[&str]) -> Counts {
        let mut counts = Counts::new();
        let prefix = format!("{name}{{");
        for (series, value) in &self.0 {
            if series == name || series.starts_with(&prefix) {
                let key = labels
                    .iter()
                    .map(|l| label(series, l).unwrap_or_default().to_string())
                    .collect();
                *counts.entry(key).or_default() += value;
            }
        }
        counts
    }

    /// Metric `name` summed over all its series.
    pub fn total(&self, name: &str) -> f64 {
        sum(&self.by(name, &[]))
    }
}

/// The value of label `name` in `series`.
fn label<'a>(series: &'a str, name: &str) -> Option<&'a str> {
    let quoted = format!("{name}=\"");
    let start = series
        .match_indices(&quoted)
        .map(|(at, _)| at)
        .find(|&at| at == 0 || matches!(&series[at - 1..at], "{" | ","))?
        + quoted.len();
    let end = series[start..].find('"')? + start;
    Some(&series[start..end])
}

/// What `after` added to `before`, leaving out what did not change.
pub fn delta(before: &Counts, after: &Counts) -> Counts {
    after
        .iter()
        .map(|(key, value)| (key.clone(), value - before.get(key).copied().unwrap_or(0.0)))
        .filter(|(_, added)| *added != 0.0)
        .collect()
}

/// `counts` on one line: "key value, …", or "none".
pub fn describe(counts: &Counts) -> String {
    if counts.is_empty() {
        return "none".into();
    }
    counts
        .iter()
        .map(|(key, value)| format!("{} {value}", key.join(" ")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The sum of `counts`.
pub fn sum(counts: &Counts) -> f64 {
    counts.values().fold(0.0, |sum, value| sum + value)
}

/// Median, minimum and maximum of some durations.
pub struct Summary {
    pub median: Duration,
    pub min: Duration,
    pub max: Duration,
}

impl Summary {
    /// Panics on no samples.
    pub fn of(samples: &[Duration]) -> Self {
        let mut sorted = samples.to_vec();
        sorted.sort();
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2
        };
        Summary {
            median,
            min: sorted[0],
            max: sorted[n - 1],
        }
    }
}

/// A duration in milliseconds.
pub fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// A duration in seconds.
pub fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// How a goal came out.
pub fn met(goal: bool) -> &'static str {
    if goal { "met" } else { "missed" }
}

/// `a / b`.
pub fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

/// A definition served: where, its group, the operator, the controller and the compositions'
/// API.
pub struct Served {
    pub namespace: String,
    pub group: String,
    pub operator: Process,
    pub controller: Process,
    pub compositions: Api<DynamicObject>,
}

/// Waits until definition `namespace/name` is Ready; fails with the operator's log after
/// [`DEFINITION_LIMIT`].
pub async fn wait_definition(
    bed: &TestBed,
    operator: &Process,
    namespace: &str,
    name: &str,
) -> Result<(), Error> {
    let definitions = Api::<CompositionDefinition>::namespaced(bed.client.clone(), namespace);
    let start = Instant::now();
    loop {
        let definition = definitions.get(name).await?;
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

/// Waits until the API server serves `api`'s kind and takes writes of it; how long that took.
/// The first write of a CRD's kind just established is held for about 2 s (once per CRD
/// version; listings are answered at once, with 429s at first). `sample`, a composition, is
/// created as a server-side dry run, which makes that first write and stores nothing. It happens
/// once, before any composition could be installed, so the benches time it apart.
pub async fn warm_up(api: &Api<DynamicObject>, sample: &DynamicObject) -> Result<Duration, Error> {
    let start = Instant::now();
    loop {
        match api.list_metadata(&ListParams::default().limit(1)).await {
            Ok(_) => break,
            Err(kube::Error::Api(status)) if matches!(status.code, 404 | 429) => {}
            Err(error) => return Err(error.into()),
        }
        if start.elapsed() > DEFINITION_LIMIT {
            return Err(format!("the kind was not served after {DEFINITION_LIMIT:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    api.create(&dry_run, sample).await?;
    Ok(start.elapsed())
}

/// Clock ticks per second of `/proc/PID/stat` (`getconf CLK_TCK`, 100 on Linux).
const CLOCK_TICKS: f64 = 100.0;

/// CPU seconds (user and system) process `pid` (or `self`) and the children it has waited for
/// used, from `/proc/PID/stat`.
pub fn cpu_seconds(pid: &str) -> Result<f64, Error> {
    // utime, stime, cutime and cstime.
    stat_seconds(pid, 14..18)
}

/// The processes whose parent is `pid`.
fn running_children(pid: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.bytes().all(|b| b.is_ascii_digit()))
        .filter(|child| {
            // The parent's PID is field 4, the second after the command name.
            std::fs::read_to_string(format!("/proc/{child}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1).map(|ppid| ppid == pid))
                    .unwrap_or(false)
            })
        })
        .collect()
}

/// The sum of fields `fields` (numbered as in stat(5), from 1) of `/proc/PID/stat`, clock ticks
/// in seconds.
fn stat_seconds(pid: &str, fields: std::ops::Range<usize>) -> Result<f64, Error> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path)?;
    // The fields after the command name (field 2, in parentheses, may hold anything); the state
    // is field 3.
    let after_command: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = after_command
        .get(fields.start - 3..fields.end - 3)
        .ok_or_else(|| format!("{path} is too short"))?
        .iter()
        .map(|field| field.parse::<f64>())
        .sum::<Result<f64, _>>()
        .map_err(|e| format!("{path}: {e}"))?;
    Ok(ticks / CLOCK_TICKS)
}

/// CPU seconds used so far by the test bed's API server and etcd, and by this process's
/// finished children (the baseline's `helm` processes).
#[derive(Clone, Copy, Debug, Default)]
pub struct BedCpu {
    /// kube-apiserver.
    pub apiserver: f64,
    /// etcd.
    pub etcd: f64,
    /// This process's children it has waited for.
    pub children: f64,
}

impl BedCpu {
    /// Now.
    pub fn now() -> Result<BedCpu, Error> {
        let dir = PathBuf::from(env("TESTBED_DIR")?).join("pids");
        let of = |name: &str| -> Result<f64, Error> {
            let pid = std::fs::read_to_string(dir.join(name))?;
            cpu_seconds(pid.trim())
        };
        // cutime and cstime.
        let children = stat_seconds("self", 16..18)?;
        Ok(BedCpu {
            apiserver: of("kube-apiserver")?,
            etcd: of("etcd")?,
            children,
        })
    }

    /// What was used since `before`.
    pub fn since(self, before: BedCpu) -> BedCpu {
        BedCpu {
            apiserver: self.apiserver - before.apiserver,
            etcd: self.etcd - before.etcd,
            children: self.children - before.children,
        }
    }
}
