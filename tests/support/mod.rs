//! What integration tests share: the test bed's environment, a client for its apiserver, and
//! `helm` with isolated state.
//!
//! The test bed is started by `e2e/with-testbed.sh` (what `make test` runs); a test run outside
//! it fails with a message saying so rather than skipping.

#![allow(dead_code)]

pub mod charts;
pub mod definitions;
pub mod installed;
pub mod operator;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, PostParams};

/// A test bed variable; panics with instructions when the test bed is not up.
pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run the tests through `make test` (or `e2e/with-testbed.sh cargo test`)")
    })
}

/// Installs the process-wide rustls crypto provider (ring), as the binary does at start.
pub fn init_tls() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A client for the test bed's apiserver with the admin credentials.
pub async fn client() -> Client {
    init_tls();
    env("KUBECONFIG");
    Client::try_default()
        .await
        .expect("client for the test bed apiserver")
}

/// A name unique within this test run, valid as a DNS-1123 label.
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Creates a namespace with a unique name and returns the name.
pub async fn namespace(client: &Client, prefix: &str) -> String {
    let name = unique(prefix);
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    name
}

/// Polls `check` every 250 ms until it returns true; panics with `what` after `limit`.
pub async fn eventually<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `helm` with its own config, cache and data directories (so logins and repositories do not
/// leak between tests) and the test bed's kubeconfig.
pub struct Helm {
    home: tempfile::TempDir,
}

impl Helm {
    /// A helm with fresh, empty state.
    pub fn new() -> Self {
        Helm {
            home: tempfile::tempdir().expect("helm home"),
        }
    }

    /// A `helm` command with this state and the test bed's kubeconfig.
    pub fn command(&self) -> Command {
        let mut command = self.offline_command();
        command.env("KUBECONFIG", env("KUBECONFIG"));
        command
    }

    /// A `helm` command with this state and no cluster, for what helm does offline
    /// (`template`, `package`).
    pub fn offline_command(&self) -> Command {
        let home = self.home.path();
        let mut command = Command::new(env("HELM_BIN"));
        command
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_DATA_HOME", home.join("data"));
        command
    }

    /// Runs helm with `args`, writing `stdin` to it; returns the output whatever the exit code.
    pub fn run(&self, args: &[&str], stdin: Option<&str>) -> Output {
        use std::io::Write;
        let mut child = self
            .command()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn helm");
        let mut pipe = child.stdin.take().expect("helm stdin");
        if let Some(input) = stdin {
            pipe.write_all(input.as_bytes()).expect("write helm stdin");
        }
        drop(pipe);
        child.wait_with_output().expect("wait for helm")
    }

    /// Runs helm and panics with its stderr if it fails; returns stdout.
    pub fn ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.run(args, stdin);
        assert!(
            out.status.success(),
            "helm {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// A packaged test chart (`<name>-<version>.tgz`) from the test bed.
pub fn packaged_chart(name: &str, version: &str) -> PathBuf {
    let path = Path::new(&env("COMPOSITOR_TEST_CHARTS")).join(format!("{name}-{version}.tgz"));
    assert!(path.exists(), "test chart {} is missing", path.display());
    path
}

/// A folder of the repository's `testdata/`. The data is part of the checkout: a missing
/// folder fails the test.
pub fn testdata(folder: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(folder);
    assert!(dir.is_dir(), "{} is missing", dir.display());
    dir
}

/// The PIDs of this test process's running children named `name` (as `/proc/<pid>/stat` names
/// them: the first 15 bytes of the program's file name).
pub fn child_processes(name: &str) -> Vec<String> {
    let me = std::process::id().to_string();
    let command = format!("({name})");
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let parent = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1).map(str::to_string));
            stat.contains(&command) && parent.as_deref() == Some(me.as_str())
        })
        .collect()
}

/// A real packaged chart from `testdata/real-charts`.
pub fn real_chart(file: &str) -> PathBuf {
    let path = testdata("real-charts").join(file);
    assert!(
        path.is_file(),
        "the real chart {} is missing",
        path.display()
    );
    path
}

/// Whether ServiceAccount `name` of `namespace` may do what `attributes` (a SubjectAccessReview's
/// `resourceAttributes`) say, by the apiserver's own authorizer.
pub async fn service_account_can(
    client: &Client,
    (namespace, name): (&str, &str),
    attributes: serde_json::Value,
) -> bool {
    use k8s_openapi::api::authorization::v1::SubjectAccessReview;
    let review: SubjectAccessReview = serde_json::from_value(serde_json::json!({
        "spec": {
            "user": format!("system:serviceaccount:{namespace}:{name}"),
            "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{namespace}")],
            "resourceAttributes": attributes,
        }
    }))
    .expect("access review");
    Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("subject access review")
        .status
        .expect("review status")
        .allowed
}

/// A `compositor` process, killed when dropped.
pub struct Process {
    child: std::process::Child,
    /// Where its output goes.
    pub log: PathBuf,
}

impl Process {
    /// Starts `compositor ARGS…` with the test bed's kubeconfig, logging to a file.
    pub fn start(args: &[&str]) -> Self {
        Self::spawn(args, Path::new(&env("KUBECONFIG")), "compositor", &[])
    }

    /// Starts `compositor ARGS…` with `kubeconfig` and extra environment, in a process group of
    /// its own so that [`Process::crash`] takes its Helm children with it.
    fn spawn(args: &[&str], kubeconfig: &Path, name: &str, vars: &[(&str, &str)]) -> Self {
        use std::os::unix::process::CommandExt;
        let log = std::env::temp_dir().join(format!("{}.log", unique(name)));
        let out = std::fs::File::create(&log).expect("log file");
        let mut command = Command::new(env!("CARGO_BIN_EXE_compositor"));
        command
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("HELM_BIN", env("HELM_BIN"))
            .env("HELM_ENGINE", env("HELM_ENGINE"));
        let child = command
            .envs(vars.iter().copied())
            .stdout(out.try_clone().expect("log file"))
            .stderr(out)
            .process_group(0)
            .spawn()
            .expect("start compositor");
        Process { child, log }
    }

    /// Starts `compositor ARGS…` with `kubeconfig`.
    pub fn start_as(args: &[&str], kubeconfig: &Path) -> Self {
        Self::spawn(args, kubeconfig, "compositor", &[])
    }

    /// Sends SIGTERM, as a kubelet stopping the pod does.
    pub fn terminate(&self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
    }

    /// Whether the process has exited, waiting up to `limit` for it.
    pub async fn exits_within(&mut self, limit: Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    /// Kills the process and every process it started at once, with no chance to clean up, as
    /// a node or container failure would.
    pub fn crash(&mut self) {
        // Only while it runs: once reaped, its id (and so its group's) may be someone else's.
        if matches!(self.child.try_wait(), Ok(None)) {
            let group = format!("-{}", self.child.id());
            let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        }
        let _ = self.child.wait();
    }

    /// The operator, watching only `namespace`, with a chart cache of its own.
    pub fn operator(namespace: &str) -> Self {
        Self::operator_with(namespace, &[])
    }

    /// As [`Process::operator`], with `extra` arguments.
    pub fn operator_with(namespace: &str, extra: &[&str]) -> Self {
        let cache = std::env::temp_dir().join(unique("chart-cache"));
        let mut args = vec![
            "run",
            "--namespace",
            namespace,
            "--metrics-address",
            "127.0.0.1:0",
            "--cache-dir",
            cache.to_str().expect("utf-8 path"),
            "--controller-image",
            "compositor:test",
        ];
        args.extend_from_slice(extra);
        Self::start(&args)
    }

    /// The value of metric `series` (name and labels as exposed), read from the process's
    /// metrics endpoint; the process must log JSON (`--log-format json`).
    pub async fn metric(&self, series: &str) -> f64 {
        self.metrics()
            .await
            .lines()
            .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or(0.0)
    }

    /// The sum of the series of metric `name` whose labels `keep` keeps.
    pub async fn metric_where(&self, name: &str, keep: impl Fn(&str) -> bool) -> f64 {
        self.metrics()
            .await
            .lines()
            .filter_map(|line| {
                let (series, value) = line.rsplit_once(' ')?;
                let labels = series.strip_prefix(name)?.strip_prefix('{')?;
                keep(labels).then(|| value.parse::<f64>().ok())?
            })
            .sum()
    }

    /// The sum of every series of metric `name`, whatever its labels.
    pub async fn metric_total(&self, name: &str) -> f64 {
        self.metrics()
            .await
            .lines()
            .filter_map(|line| {
                let (series, value) = line.rsplit_once(' ')?;
                let labelled = series.strip_prefix(name)?;
                (labelled.is_empty() || labelled.starts_with('{'))
                    .then(|| value.parse::<f64>().ok())?
            })
            .sum()
    }

    /// The API requests that write (create, update, patch, delete, deletecollection) the
    /// process made on `cluster` (`local` or a registered cluster's name), by its metrics.
    pub async fn api_writes(&self, cluster: &str) -> f64 {
        let mut writes = 0.0;
        for verb in ["create", "update", "patch", "delete", "deletecollection"] {
            let series =
                format!("compositor_api_requests_total{{cluster=\"{cluster}\",verb=\"{verb}\"");
            writes += self.metric_sum(&series).await;
        }
        writes
    }

    /// The sum of every series that starts with `prefix` (a name and its first labels, e.g.
    /// `name{verb="create",`), whatever the labels after it.
    pub async fn metric_sum(&self, prefix: &str) -> f64 {
        self.metrics()
            .await
            .lines()
            .filter(|line| line.starts_with(prefix))
            .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
            .fold(0.0, |sum, value| sum + value)
    }

    async fn metrics(&self) -> String {
        let address = self
            .output()
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .find(|line| line["message"] == "serving metrics and health")
            .and_then(|line| line["address"].as_str().map(str::to_string))
            .expect("the process logs its metrics address");
        reqwest::get(format!("http://{address}/metrics"))
            .await
            .expect("metrics endpoint")
            .text()
            .await
            .expect("metrics text")
    }

    /// What it has logged so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.crash();
    }
}

/// Plays kubelet for a controller Deployment that compositor made: the test bed has no nodes, so
/// this reads the Deployment's command and arguments, obtains a token for its ServiceAccount,
/// writes a kubeconfig with that token, and runs the controller locally. The controller then has
/// exactly the RBAC the operator gave it.
pub async fn run_deployment(
    client: &Client,
    namespace: &str,
    name: &str,
    extra_args: &[&str],
) -> Process {
    use k8s_openapi::api::apps::v1::Deployment;

    let deployment = Api::<Deployment>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .expect("controller deployment");
    let pod = deployment
        .spec
        .expect("spec")
        .template
        .spec
        .expect("pod spec");
    let container = &pod.containers[0];
    let service_account = pod.service_account_name.expect("service account");
    let path = service_account_kubeconfig(client, namespace, &service_account).await;

    let mut args: Vec<&str> = container
        .args
        .iter()
        .flatten()
        .map(String::as_str)
        .collect();
    args.extend_from_slice(extra_args);
    // The downward API, as the kubelet would fill it in.
    let mut vars = vec![("POD_NAME".to_string(), name.to_string())];
    for var in container.env.iter().flatten() {
        let field = var
            .value_from
            .as_ref()
            .and_then(|from| from.field_ref.as_ref());
        match field.map(|field| field.field_path.as_str()) {
            Some("metadata.name") => vars.push((var.name.clone(), name.to_string())),
            Some("metadata.namespace") => vars.push((var.name.clone(), namespace.to_string())),
            _ => {}
        }
    }
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Process::spawn(&args, &path, name, &vars)
}

/// The test bed's node, when it has one (`e2e/testbed.sh up --node`, what `make test` starts
/// where the machine allows): compositor's Deployments then run as pods of its image.
pub fn node() -> Option<String> {
    std::env::var("COMPOSITOR_TEST_NODE").ok()
}

/// A Deployment of compositor, running: as pods on the test bed's node, or, without one, as a
/// local process playing kubelet ([`run_deployment`]).
pub enum Running {
    /// Its pods, whose logs the kubelet writes under the test bed's `pods/`.
    Pods { namespace: String, name: String },
    /// The local process.
    Process(Process),
}

impl Running {
    /// What it has logged so far (every pod's containers, on a node).
    pub fn output(&self) -> String {
        match self {
            Running::Process(process) => process.output(),
            Running::Pods { namespace, name } => pod_logs(namespace, name),
        }
    }
}

/// Runs Deployment `namespace/name`: on the node, waits until it is available (its pods Ready
/// through their probes); without one, plays kubelet with `local_args` added to its arguments.
pub async fn deployment_runs(
    client: &Client,
    namespace: &str,
    name: &str,
    local_args: &[&str],
) -> Running {
    use k8s_openapi::api::apps::v1::Deployment;
    if node().is_none() {
        return Running::Process(run_deployment(client, namespace, name, local_args).await);
    }
    let deployments = Api::<Deployment>::namespaced(client.clone(), namespace);
    let available = || async {
        let Some(deployment) = deployments.get_opt(name).await.expect("get deployment") else {
            return false;
        };
        let generation = deployment.metadata.generation;
        let status = deployment.status.unwrap_or_default();
        status.observed_generation == generation
            && status.updated_replicas.unwrap_or(0) >= 1
            && status.available_replicas.unwrap_or(0) >= 1
            && status.unavailable_replicas.unwrap_or(0) == 0
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while !available().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "Deployment {namespace}/{name} is not available on the node after 120 s\n{}",
            pod_logs(namespace, name)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Running::Pods {
        namespace: namespace.to_string(),
        name: name.to_string(),
    }
}

/// The logs of Deployment `namespace/name`'s pods on the node, read where the kubelet writes
/// them (`<namespace>_<pod>_<uid>/<container>/<restart>.log` under the test bed's `pods/`).
pub fn pod_logs(namespace: &str, name: &str) -> String {
    let root = Path::new(&env("TESTBED_DIR")).join("pods");
    let prefix = format!("{namespace}_{name}-");
    let mut pods: Vec<PathBuf> = std::fs::read_dir(&root)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .and_then(|file| file.to_str())
                .is_some_and(|file| file.starts_with(&prefix))
        })
        .collect();
    pods.sort();
    let mut text = String::new();
    for pod in pods {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&pod)
            .into_iter()
            .flatten()
            .flatten()
            .flat_map(|container| std::fs::read_dir(container.path()).into_iter().flatten())
            .flatten()
            .map(|file| file.path())
            .collect();
        files.sort();
        for file in files {
            text.push_str(&format!("--- {}\n", file.display()));
            text.push_str(&std::fs::read_to_string(&file).unwrap_or_default());
        }
    }
    text
}

/// A kubeconfig for the test bed that authenticates as ServiceAccount `namespace/name`, with a
/// token an hour long.
pub async fn service_account_kubeconfig(client: &Client, namespace: &str, name: &str) -> PathBuf {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::ServiceAccount;
    let request: TokenRequest = serde_json::from_value(
        serde_json::json!({"spec": {"audiences": [], "expirationSeconds": 3600}}),
    )
    .unwrap();
    let token = Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .expect("token for the service account")
        .status
        .expect("token")
        .token;
    // The admin kubeconfig with the ServiceAccount's token instead of the admin's.
    let admin: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(env("KUBECONFIG")).expect("kubeconfig"))
            .expect("kubeconfig yaml");
    let mut kubeconfig = admin.clone();
    kubeconfig["users"] = serde_json::json!([{"name": "testbed", "user": {"token": token}}]);
    let path = std::env::temp_dir().join(format!("{}.kubeconfig", unique(name)));
    std::fs::write(&path, serde_json::to_string(&kubeconfig).unwrap()).expect("write kubeconfig");
    path
}

/// Rewrites the state Helm stored for `revision` — the `status` label and, because that is what
/// Helm 4 reads back, `info.status` inside the gzipped release record — as a crash would leave it.
pub async fn set_stored_status(
    client: &kube::Client,
    namespace: &str,
    release: &str,
    revision: u64,
    status: &str,
) {
    use base64::Engine;
    use std::io::{Read, Write};
    let secrets = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), namespace);
    let name = format!("sh.helm.release.v1.{release}.v{revision}");
    let mut secret = secrets.get(&name).await.expect("release record");
    let data = secret.data.as_mut().expect("record data");
    let stored = data.get_mut("release").expect("release key");
    let gzipped = base64::engine::general_purpose::STANDARD
        .decode(&stored.0)
        .expect("base64 record");
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(gzipped.as_slice())
        .read_to_end(&mut json)
        .expect("gzipped record");
    let mut record: serde_json::Value = serde_json::from_slice(&json).expect("JSON record");
    record["info"]["status"] = serde_json::json!(status);
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder
        .write_all(record.to_string().as_bytes())
        .expect("gzip");
    *stored = k8s_openapi::ByteString(
        base64::engine::general_purpose::STANDARD
            .encode(encoder.finish().expect("gzip"))
            .into_bytes(),
    );
    secret
        .metadata
        .labels
        .as_mut()
        .expect("record labels")
        .insert("status".into(), status.into());
    secrets
        .replace(&name, &PostParams::default(), &secret)
        .await
        .expect("rewrite release record");
}

/// Applies `crd` and waits until the apiserver establishes it.
pub async fn apply_crd(
    client: &Client,
    crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::ResourceExt;
    use kube::api::{Patch, PatchParams};
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let name = crd.name_any();
    crds.patch(
        &name,
        &PatchParams::apply("test").force(),
        &Patch::Apply(&crd),
    )
    .await
    .expect("apply CRD");
    eventually(
        &format!("CRD {name} established"),
        Duration::from_secs(30),
        || async {
            crds.get(&name)
                .await
                .ok()
                .and_then(|c| c.status)
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        },
    )
    .await;
}

/// Installs compositor's own CRDs, as its Helm chart does in a real cluster.
pub async fn install_crds(client: &Client) {
    use kube::CustomResourceExt;
    apply_crd(client, compositor::api::CompositionDefinition::crd()).await;
}

/// Creates Secret `repo-password` in `namespace`, holding the test bed repository's password
/// under key `password`.
pub async fn repo_password(client: &Client, namespace: &str) {
    use k8s_openapi::api::core::v1::Secret;
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "repo-password"},
        "stringData": {"password": env("COMPOSITOR_TEST_REPO_PASSWORD")}
    }))
    .expect("secret");
    Api::<Secret>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &secret)
        .await
        .expect("create secret");
}

/// A second cluster: a control plane of its own (`e2e/testbed.sh up --control-plane-only` in a
/// temporary directory), stopped by `e2e/testbed.sh down` when dropped, whether the test passed
/// or not.
pub struct Remote {
    dir: tempfile::TempDir,
}

impl Remote {
    /// Starts it; panics with the script's output if it does not come up.
    pub fn up() -> Remote {
        let dir = tempfile::Builder::new()
            .prefix("compositor-remote.")
            .tempdir_in("/tmp")
            .expect("remote test bed dir");
        let remote = Remote { dir };
        let out = remote.testbed(&["up", "--control-plane-only"]);
        assert!(
            out.status.success(),
            "the remote control plane did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        remote
    }

    fn testbed(&self, args: &[&str]) -> std::process::Output {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/testbed.sh");
        Command::new(script)
            .args(args)
            .env("TESTBED_DIR", self.dir.path())
            .output()
            .expect("run e2e/testbed.sh")
    }

    /// The admin kubeconfig the test bed wrote.
    pub fn admin_kubeconfig(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("kubeconfig")).expect("remote kubeconfig")
    }

    /// A client with the admin credentials.
    pub async fn client(&self) -> Client {
        init_tls();
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&self.admin_kubeconfig())
            .expect("remote kubeconfig");
        let options = kube::config::KubeConfigOptions::default();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .expect("remote config");
        Client::try_from(config).expect("remote client")
    }

    fn pid(&self, process: &str) -> PathBuf {
        self.dir.path().join("pids").join(process)
    }

    /// Kills the API server (SIGKILL: a crashed cluster; after SIGTERM it stops listening at once
    /// but drains for a minute) and waits until it has exited. An exited process may linger as a
    /// zombie (nothing reaps orphans here), so "exited" is: gone, or in state `Z`.
    pub async fn stop_apiserver(&self) {
        let pid = std::fs::read_to_string(self.pid("kube-apiserver")).expect("apiserver pid");
        let pid = pid.trim().to_string();
        let out = Command::new("kill").args(["-KILL", &pid]).output();
        assert!(
            out.is_ok_and(|out| out.status.success()),
            "kill the remote apiserver"
        );
        let stat = PathBuf::from(format!("/proc/{pid}/stat"));
        eventually(
            "the remote apiserver exits",
            Duration::from_secs(30),
            || {
                let exited = std::fs::read_to_string(&stat).map_or(true, |stat| {
                    stat.rsplit(')')
                        .next()
                        .unwrap_or("")
                        .trim_start()
                        .starts_with('Z')
                });
                async move { exited }
            },
        )
        .await;
    }
}

impl Remote {
    /// A kubeconfig for the remote that authenticates with a client certificate for user
    /// `user` in group `system:masters`, signed by the remote's CA (the API server's
    /// `--client-ca-file`), with the API server's name given as `tls-server-name`.
    pub fn client_certificate_kubeconfig(&self, user: &str) -> String {
        let pki = self.dir.path().join("pki");
        let key = pki.join(format!("{user}.key"));
        let csr = pki.join(format!("{user}.csr"));
        let crt = pki.join(format!("{user}.crt"));
        let subject = format!("/CN={user}/O=system:masters");
        // Extensions make it an X.509 v3 certificate, the only version rustls accepts.
        let extensions = pki.join(format!("{user}.ext"));
        std::fs::write(
            &extensions,
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n",
        )
        .expect("extensions file");
        let openssl = |args: &[&std::ffi::OsStr]| {
            let out = Command::new("openssl")
                .args(args)
                .output()
                .expect("openssl");
            assert!(out.status.success(), "openssl {args:?}: {out:?}");
        };
        openssl(&[
            "req".as_ref(),
            "-newkey".as_ref(),
            "rsa:2048".as_ref(),
            "-nodes".as_ref(),
            "-keyout".as_ref(),
            key.as_os_str(),
            "-out".as_ref(),
            csr.as_os_str(),
            "-subj".as_ref(),
            subject.as_ref(),
        ]);
        openssl(&[
            "x509".as_ref(),
            "-req".as_ref(),
            "-in".as_ref(),
            csr.as_os_str(),
            "-CA".as_ref(),
            pki.join("ca.crt").as_os_str(),
            "-CAkey".as_ref(),
            pki.join("ca.key").as_os_str(),
            "-CAcreateserial".as_ref(),
            "-days".as_ref(),
            "1".as_ref(),
            "-extfile".as_ref(),
            extensions.as_os_str(),
            "-out".as_ref(),
            crt.as_os_str(),
        ]);
        use base64::Engine;
        let encode = |path: &Path| {
            base64::engine::general_purpose::STANDARD.encode(std::fs::read(path).expect("pem"))
        };
        let admin = self.admin_kubeconfig();
        let mut lines = Vec::new();
        for line in admin.lines() {
            match line.split_once("token: ") {
                Some((indent, _)) => {
                    lines.push(format!("{indent}client-certificate-data: {}", encode(&crt)));
                    lines.push(format!("{indent}client-key-data: {}", encode(&key)));
                }
                None if line.trim_start().starts_with("server: ") => {
                    lines.push(line.to_string());
                    let indent = &line[..line.len() - line.trim_start().len()];
                    lines.push(format!("{indent}tls-server-name: localhost"));
                }
                None => lines.push(line.to_string()),
            }
        }
        lines.join("\n")
    }

    /// Starts the API server [`Remote::stop_apiserver`] killed again, on the same port with the
    /// same data, and waits until it is ready.
    pub fn start_apiserver(&self) {
        let out = self.testbed(&["restart", "kube-apiserver"]);
        assert!(
            out.status.success(),
            "the remote apiserver did not come back: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        let out = self.testbed(&["down"]);
        if !out.status.success() {
            eprintln!(
                "stopping the remote control plane failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// Packages a chart written by the test into the test bed's repository directory; returns its URL
/// (of the version its `Chart.yaml` says).
pub fn publish_chart(name: &str, files: &[(&str, &str)]) -> String {
    let source = tempfile::tempdir().unwrap();
    let chart = source.path().join(name);
    for (path, content) in files {
        let file = chart.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, content).unwrap();
    }
    let repo = std::path::Path::new(&env("TESTBED_DIR")).join("repo");
    Helm::new().ok(
        &[
            "package",
            chart.to_str().unwrap(),
            "-d",
            repo.to_str().unwrap(),
        ],
        None,
    );
    let version = files
        .iter()
        .filter(|(path, _)| *path == "Chart.yaml")
        .flat_map(|(_, content)| content.lines())
        .find_map(|line| line.strip_prefix("version:"))
        .map(str::trim)
        .expect("Chart.yaml with a version");
    format!("{}/{name}-{version}.tgz", env("COMPOSITOR_TEST_REPO_URL"))
}

/// An operator watching a namespace of its own, which holds the test repository's password,
/// and a CRD group of its own for the definitions there.
pub struct OperatorBed {
    /// Admin client.
    pub client: Client,
    /// The watched namespace.
    pub namespace: String,
    /// `<namespace>.compositor.dev`.
    pub group: String,
    /// The operator.
    pub operator: Process,
}

impl OperatorBed {
    /// Starts one in a new namespace named after `prefix`.
    pub async fn new(prefix: &str) -> OperatorBed {
        let client = client().await;
        install_crds(&client).await;
        let namespace = namespace(&client, prefix).await;
        repo_password(&client, &namespace).await;
        OperatorBed {
            group: format!("{namespace}.compositor.dev"),
            operator: Process::operator(&namespace),
            client,
            namespace,
        }
    }
}

/// Applies definition `namespace/name` with `spec` (server-side, as `kubectl apply` would).
/// `spec.health.mode: Ignore` unless a definition's `spec` says otherwise: the node here has no
/// image of the test charts but its pause image (and a registered cluster no node at all), so a
/// test of something else has its compositions Ready once Helm wrote their releases;
/// tests/health.rs waits for what they run.
pub fn health_ignored_unless_asked(spec: &mut serde_json::Value) {
    if spec.get("health").is_none() {
        spec["health"] = serde_json::json!({"mode": "Ignore"});
    }
}

pub async fn apply_definition(
    client: &Client,
    namespace: &str,
    name: &str,
    mut spec: serde_json::Value,
) {
    use kube::api::{Patch, PatchParams};
    health_ignored_unless_asked(&mut spec);
    let definition = serde_json::json!({
        "apiVersion": "compositor.dev/v1alpha1", "kind": "CompositionDefinition",
        "metadata": {"name": name}, "spec": spec,
    });
    Api::<compositor::api::CompositionDefinition>::namespaced(client.clone(), namespace)
        .patch(
            name,
            &PatchParams::apply("test").force(),
            &Patch::Apply(&definition),
        )
        .await
        .expect("apply definition");
}
