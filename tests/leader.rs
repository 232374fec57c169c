//! Leader election against the test bed: of several operator (or controller) processes only the
//! holder of the Lease reconciles, a standby takes over a crashed leader within the lease
//! duration and a terminated one at once; and `compositor_api_requests_total`, which shows who
//! writes, is exposed with bounded labels and moves with the work done.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::json;

use compositor::api::{CompositionDefinition, find_condition};
use support::Process;

/// A namespace with the chart repository's password, and a CRD group of its own.
struct Fixture {
    client: Client,
    namespace: String,
    group: String,
}

impl Fixture {
    async fn new(prefix: &str) -> Self {
        let client = support::client().await;
        support::install_crds(&client).await;
        let namespace = support::namespace(&client, prefix).await;
        support::repo_password(&client, &namespace).await;
        let group = format!("{namespace}.compositor.dev");
        Fixture {
            client,
            namespace,
            group,
        }
    }

    /// An operator watching this namespace, logging JSON (so its metrics can be read), with
    /// `extra` flags.
    fn operator(&self, extra: &[&str]) -> Process {
        let cache = std::env::temp_dir().join(support::unique("chart-cache"));
        let mut args = vec![
            "run",
            "--namespace",
            &self.namespace,
            "--metrics-address",
            "127.0.0.1:0",
            "--cache-dir",
            cache.to_str().expect("utf-8 path"),
            "--controller-image",
            "compositor:test",
            "--log-format",
            "json",
        ];
        args.extend_from_slice(extra);
        Process::start(&args)
    }

    /// An operator that elects its leader with Lease `lease` of `seconds` in this namespace.
    fn electing_operator(&self, lease: &str, seconds: &str) -> Process {
        self.operator(&[
            "--leader-elect",
            "--leader-election-namespace",
            &self.namespace,
            "--leader-election-name",
            lease,
            "--leader-election-lease-seconds",
            seconds,
        ])
    }

    fn leases(&self) -> Api<Lease> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Applies definition `plain` of the test chart `plain` 0.1.0 (a ConfigMap).
    async fn apply_plain(&self) {
        let definition = json!({
            "apiVersion": "compositor.dev/v1alpha1", "kind": "CompositionDefinition",
            "metadata": {"name": "plain"},
            "spec": {
                "chart": {
                    "url": support::env("COMPOSITOR_TEST_REPO_URL"),
                    "repo": "plain", "version": "0.1.0",
                    "credentials": {"username": support::env("COMPOSITOR_TEST_REPO_USERNAME"),
                                    "passwordRef": {"name": "repo-password", "key": "password"}},
                },
                "names": {"group": self.group},
            },
        });
        Api::<CompositionDefinition>::namespaced(self.client.clone(), &self.namespace)
            .patch(
                "plain",
                &PatchParams::apply("test").force(),
                &Patch::Apply(&definition),
            )
            .await
            .expect("apply definition");
    }

    async fn wait_ready(&self) {
        let api = Api::<CompositionDefinition>::namespaced(self.client.clone(), &self.namespace);
        support::eventually(
            "definition plain Ready",
            Duration::from_secs(60),
            || async {
                let definition = api.get("plain").await.expect("definition");
                let conditions = definition.status.unwrap_or_default().conditions;
                find_condition(&conditions, "Ready").is_some_and(|c| c.status == "True")
            },
        )
        .await;
    }
}

/// A value the process logged with `message`, once it has.
async fn logged(process: &Process, message: &str, field: &str) -> String {
    let mut value = None;
    support::eventually(
        &format!("{message:?} logged"),
        Duration::from_secs(60),
        || {
            value = process
                .output()
                .lines()
                .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
                .find(|line| line["message"] == message)
                .and_then(|line| line[field].as_str().map(str::to_string));
            std::future::ready(value.is_some())
        },
    )
    .await;
    value.expect("logged")
}

/// The holder identity a candidate logged when it joined the election.
async fn identity(process: &Process) -> String {
    logged(process, "joined the leader election", "identity").await
}

async fn holder(leases: &Api<Lease>, name: &str) -> Option<String> {
    leases
        .get_opt(name)
        .await
        .expect("read lease")
        .and_then(|lease| lease.spec?.holder_identity)
}

/// Waits until one of `candidates` holds lease `name`; returns its index.
async fn wait_leader(leases: &Api<Lease>, name: &str, candidates: &[&str]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let current = holder(leases, name).await;
        if let Some(leader) = candidates
            .iter()
            .position(|candidate| current.as_deref() == Some(candidate))
        {
            return leader;
        }
        assert!(
            Instant::now() < deadline,
            "no leader; lease held by {current:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The status code and body of `path` on the process's metrics and health endpoint.
async fn get(process: &Process, path: &str) -> (u16, String) {
    let address = logged(process, "serving metrics and health", "address").await;
    let response = reqwest::get(format!("http://{address}{path}"))
        .await
        .expect("endpoint");
    let status = response.status().as_u16();
    (status, response.text().await.expect("body"))
}

/// Every series of metric `name`: its labels and value.
async fn series(process: &Process, name: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    let (status, text) = get(process, "/metrics").await;
    assert_eq!(status, 200, "{text}");
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix('{')?;
            let (labels, value) = rest.rsplit_once("} ")?;
            let labels = labels
                .split("\",")
                .filter_map(|pair| {
                    let (key, value) = pair.split_once("=\"")?;
                    Some((key.to_string(), value.trim_end_matches('"').to_string()))
                })
                .collect();
            Some((labels, value.parse().ok()?))
        })
        .collect()
}

/// Requests that changed something, other than on the election's own Lease.
async fn writes(process: &Process) -> f64 {
    series(process, "compositor_api_requests_total")
        .await
        .into_iter()
        .filter(|(labels, _)| {
            ["create", "update", "patch", "delete"].contains(&labels["verb"].as_str())
                && labels["resource"] != "leases"
        })
        .map(|(_, value)| value)
        .sum()
}

async fn reconciles(process: &Process) -> f64 {
    process.metric_total("compositor_reconciles_total").await
}

/// The process id in a holder identity (`<host or pod>_<pid>-<random>`).
fn pid_of(identity: &str) -> String {
    let (_, suffix) = identity.rsplit_once('_').expect("identity with a pid");
    let (pid, _) = suffix.split_once('-').expect("identity with a pid");
    pid.to_string()
}

#[tokio::test]
async fn only_the_lease_holder_reconciles_and_a_standby_takes_over_a_crashed_leader() {
    let fixture = Fixture::new("lead-crash").await;
    let lease = support::unique("operator");
    let seconds = 8;
    let candidates = [
        fixture.electing_operator(&lease, &seconds.to_string()),
        fixture.electing_operator(&lease, &seconds.to_string()),
    ];
    let identities = [
        identity(&candidates[0]).await,
        identity(&candidates[1]).await,
    ];
    assert_ne!(
        identities[0], identities[1],
        "every process has its own identity"
    );
    let ids = [identities[0].as_str(), identities[1].as_str()];
    let first = wait_leader(&fixture.leases(), &lease, &ids).await;
    let [a, b] = candidates;
    let (mut leader, follower) = if first == 0 { (a, b) } else { (b, a) };
    let follower_identity = &identities[1 - first];

    // The standby is alive and ready, but does nothing.
    assert_eq!(get(&follower, "/healthz").await.0, 200);
    assert_eq!(get(&follower, "/readyz").await.0, 200);
    fixture.apply_plain().await;
    fixture.wait_ready().await;
    assert!(reconciles(&leader).await > 0.0, "the leader reconciled");
    assert!(writes(&leader).await > 0.0, "the leader wrote");
    // Give a standby that wrongly reconciled time to show it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        reconciles(&follower).await,
        0.0,
        "the standby never reconciles"
    );
    assert_eq!(writes(&follower).await, 0.0, "the standby writes nothing");
    assert_eq!(
        holder(&fixture.leases(), &lease).await.as_deref(),
        Some(ids[first]),
        "the leader keeps its lease by renewing it"
    );

    // A crash releases nothing: the standby takes over once the lease expires.
    let crashed = Instant::now();
    leader.crash();
    support::eventually(
        "the standby holds the lease",
        Duration::from_secs(seconds + 15),
        || async { holder(&fixture.leases(), &lease).await.as_ref() == Some(follower_identity) },
    )
    .await;
    let took = crashed.elapsed();
    eprintln!("hand-over after a crash took {took:?} (lease {seconds} s)");
    assert!(
        took <= Duration::from_secs(seconds + 3),
        "hand-over took {took:?}, more than the {seconds} s lease and a margin"
    );

    // The new leader reconciles: a deleted controller comes back.
    let deployments = Api::<Deployment>::namespaced(fixture.client.clone(), &fixture.namespace);
    let name = "plains-v0-1-0-controller";
    let before = deployments.get(name).await.expect("controller deployment");
    deployments
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete");
    support::eventually(
        "the new leader recreates the controller",
        Duration::from_secs(30),
        || async {
            deployments
                .get_opt(name)
                .await
                .unwrap()
                .is_some_and(|d| d.uid() != before.uid())
        },
    )
    .await;
    // The counter moves when the reconcile ends, a moment after the Deployment it recreated.
    support::eventually(
        "the new leader counts its reconcile",
        Duration::from_secs(10),
        || async { reconciles(&follower).await > 0.0 },
    )
    .await;
}

#[tokio::test]
async fn a_terminated_leader_releases_its_lease_and_a_standby_takes_over_at_once() {
    let fixture = Fixture::new("lead-term").await;
    let lease = support::unique("operator");
    // A long lease: a take-over well within it can only come from the release.
    let seconds = 30;
    let candidates = [
        fixture.electing_operator(&lease, &seconds.to_string()),
        fixture.electing_operator(&lease, &seconds.to_string()),
    ];
    let identities = [
        identity(&candidates[0]).await,
        identity(&candidates[1]).await,
    ];
    let ids = [identities[0].as_str(), identities[1].as_str()];
    let first = wait_leader(&fixture.leases(), &lease, &ids).await;
    let leader = &candidates[first];
    let follower = &identities[1 - first];

    let terminated = Instant::now();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid_of(ids[first])])
        .status()
        .expect("kill");
    assert!(status.success());
    support::eventually(
        "the standby holds the lease",
        Duration::from_secs(10),
        || async { holder(&fixture.leases(), &lease).await.as_ref() == Some(follower) },
    )
    .await;
    let took = terminated.elapsed();
    eprintln!("hand-over after SIGTERM took {took:?} (lease {seconds} s)");
    assert!(took < Duration::from_secs(5), "hand-over took {took:?}");
    logged(leader, "left the leader election", "lease").await;
    logged(leader, "operator stopped", "message").await;
}

#[tokio::test]
async fn a_leader_whose_lease_is_taken_exits_with_an_error_at_once() {
    let fixture = Fixture::new("lead-lost").await;
    let lease = support::unique("operator");
    let seconds = 6;
    let leader = fixture.electing_operator(&lease, &seconds.to_string());
    let me = identity(&leader).await;
    wait_leader(&fixture.leases(), &lease, &[&me]).await;

    // Another holder appears in the lease, as when this one stalled past its expiry.
    let taken = Instant::now();
    let now = k8s_openapi::jiff::Timestamp::now();
    let patch = json!({"spec": {
        "holderIdentity": "intruder",
        "renewTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(now),
        "leaseDurationSeconds": 60,
    }});
    fixture
        .leases()
        .patch(&lease, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("take the lease");
    let pid = pid_of(&me);
    support::eventually(
        "the old leader exits",
        Duration::from_secs(seconds + 5),
        || async {
            // Exited: gone, or a zombie until the test reaps it.
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|stat| {
                    stat.rsplit_once(") ")
                        .is_some_and(|(_, rest)| rest.starts_with('Z'))
                })
                .unwrap_or(true)
        },
    )
    .await;
    let took = taken.elapsed();
    eprintln!("a leader whose lease was taken stopped after {took:?} (lease {seconds} s)");
    assert!(took <= Duration::from_secs(seconds), "took {took:?}");
    let output = leader.output();
    assert!(
        output.contains("compositor: lost the leader lease: lease ")
            && output.contains("is held by intruder"),
        "{output}"
    );
}

#[tokio::test]
async fn controllers_elect_a_leader_with_the_rbac_their_bundle_grants() {
    let fixture = Fixture::new("lead-ctl").await;
    let _operator = fixture.operator(&[]);
    fixture.apply_plain().await;
    fixture.wait_ready().await;

    // Two replicas of the controller Deployment, each with the ServiceAccount's own token.
    let name = "plains-v0-1-0-controller";
    let cache = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let mut candidates = Vec::new();
    for cache in &cache {
        let args = [
            "--log-format",
            "json",
            "--metrics-address",
            "127.0.0.1:0",
            "--cache-dir",
            cache.path().to_str().unwrap(),
            "--leader-elect",
            "--leader-election-lease-seconds",
            "8",
        ];
        candidates
            .push(support::run_deployment(&fixture.client, &fixture.namespace, name, &args).await);
    }
    let identities = [
        identity(&candidates[0]).await,
        identity(&candidates[1]).await,
    ];
    assert_ne!(
        identities[0], identities[1],
        "one pod name, still two identities"
    );
    let ids = [identities[0].as_str(), identities[1].as_str()];
    // The Lease is the one the bundle grants: named after the Deployment, in its namespace.
    let first = wait_leader(&fixture.leases(), name, &ids).await;
    let (leader, follower) = (&candidates[first], &candidates[1 - first]);

    let team = support::namespace(&fixture.client, "lead-team").await;
    let gvk = GroupVersionKind::gvk(&fixture.group, "v0-1-0", "Plain");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "plains");
    let compositions =
        Api::<DynamicObject>::namespaced_with(fixture.client.clone(), &team, &resource);
    let composition: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{}/v0-1-0", fixture.group), "kind": "Plain",
        "metadata": {"name": "one"}, "spec": {"message": "hi"}
    }))
    .unwrap();
    compositions
        .create(&PostParams::default(), &composition)
        .await
        .expect("composition");
    support::eventually("composition Ready", Duration::from_secs(90), || async {
        let object = compositions.get("one").await.expect("composition");
        object.data["status"]["phase"] == "Ready"
    })
    .await;
    assert!(reconciles(leader).await > 0.0, "the leader reconciled");
    assert_eq!(
        leader
            .metric(r#"compositor_compositions{phase="Ready"}"#)
            .await,
        1.0
    );
    assert_eq!(
        reconciles(follower).await,
        0.0,
        "the standby never reconciles"
    );
    assert_eq!(writes(follower).await, 0.0, "the standby writes nothing");
    // `helm version` is asked once at start (it is part of every fingerprint); nothing else.
    let helm_calls: f64 = series(follower, "compositor_helm_calls_total")
        .await
        .into_iter()
        .filter(|(labels, _)| labels["verb"] != "version")
        .map(|(_, value)| value)
        .sum();
    assert_eq!(helm_calls, 0.0, "the standby runs no helm");
}

#[tokio::test]
async fn api_requests_are_counted_with_bounded_labels_and_move_with_the_work() {
    let fixture = Fixture::new("api-metrics").await;
    // No election: the operator reconciles at once, as it always did.
    let operator = fixture.operator(&[]);
    let crd_patches = || async {
        series(&operator, "compositor_api_requests_total")
            .await
            .into_iter()
            .filter(|(labels, _)| {
                labels["verb"] == "patch" && labels["resource"] == "customresourcedefinitions"
            })
            .map(|(_, value)| value)
            .sum::<f64>()
    };
    // The operator lists and watches definitions as soon as it starts.
    support::eventually("definitions watched", Duration::from_secs(30), || async {
        series(&operator, "compositor_api_requests_total")
            .await
            .iter()
            .any(|(labels, _)| {
                labels["verb"] == "watch" && labels["resource"] == "compositiondefinitions"
            })
    })
    .await;
    let before = crd_patches().await;
    assert_eq!(before, 0.0, "no CRD applied before a definition exists");

    fixture.apply_plain().await;
    fixture.wait_ready().await;
    assert!(crd_patches().await > before, "applying the CRD is counted");
    assert_eq!(
        operator
            .metric(r#"compositor_definitions{phase="Ready"}"#)
            .await,
        1.0
    );

    let all = series(&operator, "compositor_api_requests_total").await;
    assert!(!all.is_empty());
    for (labels, _) in &all {
        let keys: Vec<&str> = labels.keys().map(String::as_str).collect();
        assert_eq!(keys, ["cluster", "code", "resource", "verb"], "{labels:?}");
        assert_eq!(
            labels["cluster"], "local",
            "the operator talks to its own cluster only"
        );
        let code = &labels["code"];
        assert!(
            code == "<error>" || (code.len() == 3 && code.parse::<u16>().is_ok()),
            "{labels:?}"
        );
        for value in labels.values() {
            assert!(
                !value.contains(&fixture.namespace),
                "no names or namespaces in labels: {labels:?}"
            );
        }
    }
}

#[tokio::test]
async fn an_operator_whose_watches_never_start_still_stops_on_sigterm() {
    use k8s_openapi::api::core::v1::ServiceAccount;
    let client = support::client().await;
    let namespace = support::namespace(&client, "lead-stuck").await;
    // An identity that may do nothing at all: every watch of the operator is refused.
    let nobody: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "nobody"}})).unwrap();
    Api::<ServiceAccount>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &nobody)
        .await
        .expect("service account");
    let kubeconfig = support::service_account_kubeconfig(&client, &namespace, "nobody").await;
    let mut operator = Process::start_as(
        &[
            "run",
            "--namespace",
            &namespace,
            "--metrics-address",
            "127.0.0.1:0",
            "--log-format",
            "json",
        ],
        &kubeconfig,
    );
    logged(&operator, "operator started", "message").await;
    operator.terminate();
    // The grace period for reconciles is 20 s; a kubelet kills after 30 s.
    assert!(
        operator.exits_within(Duration::from_secs(28)).await,
        "the operator ignored SIGTERM:\n{}",
        operator.output()
    );
}
