//! A chart version moves the fleet in waves, gated by health, on the test bed's node: a version
//! whose pods cannot start reaches the canary alone and is rolled back (or, with `Halt`, left
//! there), a healthy one moves wave after wave with never more than the canary and
//! `maxUnavailable` releases not healthy at once, and an operator killed mid-wave resumes.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};

use compositor::api::{CompositionDefinition, find_condition};
use support::definitions::{Fixture, run_controller};
use support::operator::{event_notes, publish_indexed};

/// The node's one image; the bad version asks for one it does not have.
const PAUSE: &str = "localhost/pause:3.10";
const ABSENT: &str = "localhost/absent:1";

/// Publishes chart `name` at each of `versions`: 0.1.0 and 0.3.0 run a Deployment of the pause
/// image, 0.2.0 one of an image the node does not have, whose pods never start.
fn publish_versions(name: &str, versions: &[&str]) {
    let deployment = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: '{{ .Release.Name }}-web', labels: {chart: '{{ .Chart.Version }}'}}
spec:
  replicas: 1
  selector: {matchLabels: {app: '{{ .Release.Name }}-web'}}
  template:
    metadata: {labels: {app: '{{ .Release.Name }}-web'}}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
        - name: web
          image: {{ .Values.image | quote }}
          imagePullPolicy: Never
"#;
    for version in versions {
        let image = if *version == "0.2.0" { ABSENT } else { PAUSE };
        let chart = format!("apiVersion: v2\nname: {name}\nversion: {version}\n");
        let values = format!("image: {image}\n");
        publish_indexed(
            name,
            &[
                ("Chart.yaml", &chart),
                ("values.yaml", &values),
                ("templates/web.yaml", deployment),
            ],
        );
    }
}

/// A definition of a chart published in three versions, its compositions in one namespace, and
/// a controller per version once the operator deploys it.
struct Fleet {
    fixture: Fixture,
    chart: String,
    namespace: String,
    rollout: Value,
    controllers: BTreeMap<String, (support::Process, tempfile::TempDir)>,
}

const KIND: &str = "WaveApp";
const PLURAL: &str = "waveapps";

impl Fleet {
    /// `None` without a node: nothing runs there, so nothing is ever healthy.
    async fn new(prefix: &str, rollout: Value) -> Option<Fleet> {
        if support::node().is_none() {
            eprintln!("no node in this test bed: what a release runs never runs");
            return None;
        }
        let fixture = Fixture::new(prefix).await;
        let chart = support::unique("waves");
        let namespace = support::namespace(&fixture.client, prefix).await;
        Some(Fleet {
            fixture,
            chart,
            namespace,
            rollout,
            controllers: BTreeMap::new(),
        })
    }

    /// Applies the definition at chart `version` with `annotations`.
    async fn apply(&self, version: &str, annotations: Value) {
        let spec = json!({
            "chart": {
                "url": support::env("COMPOSITOR_TEST_REPO_URL"),
                "repo": self.chart,
                "version": version,
                "credentials": {"username": support::env("COMPOSITOR_TEST_REPO_USERNAME"),
                                "passwordRef": {"name": "repo-password", "key": "password"}},
            },
            "names": {"group": self.fixture.group, "kind": KIND, "plural": PLURAL},
            "health": {"mode": "Wait", "timeoutSeconds": 120},
            "rollout": self.rollout,
        });
        let definition = json!({
            "apiVersion": "compositor.dev/v1alpha1", "kind": "CompositionDefinition",
            "metadata": {"name": "waves", "annotations": annotations}, "spec": spec,
        });
        let api = self.fixture.definitions();
        api.patch(
            "waves",
            &kube::api::PatchParams::apply("test").force(),
            &kube::api::Patch::Apply(&definition),
        )
        .await
        .expect("apply definition");
    }

    /// Runs the controller of CRD version `version` once the operator has deployed it.
    async fn serve(&mut self, version: &str) {
        let name = format!("{PLURAL}-{version}-controller");
        support::eventually(&name, Duration::from_secs(60), || async {
            self.fixture.has_controller(&name).await
        })
        .await;
        let running = run_controller(&self.fixture, &name).await;
        self.controllers.insert(version.to_string(), running);
    }

    fn compositions(&self, version: &str) -> Api<DynamicObject> {
        self.fixture
            .compositions(KIND, PLURAL, version, &self.namespace)
    }

    /// Publishes the chart's `versions`.
    fn publish(&self, versions: &[&str]) {
        publish_versions(&self.chart, versions);
    }

    /// Applies the definition at chart `version` (0.1.0 or a range resolving to it), creates
    /// `count` compositions and waits until each is healthy.
    async fn healthy_at_0_1_0(&mut self, version: &str, count: usize) -> Vec<String> {
        self.apply(version, json!({})).await;
        self.serve("v0-1-0").await;
        let api = self.compositions("v0-1-0");
        let names: Vec<String> = (0..count).map(|i| format!("app-{i}")).collect();
        for name in &names {
            let object: DynamicObject = serde_json::from_value(json!({
                "apiVersion": format!("{}/v0-1-0", self.fixture.group), "kind": KIND,
                "metadata": {"name": name}, "spec": {},
            }))
            .unwrap();
            api.create(&PostParams::default(), &object).await.unwrap();
        }
        self.wait_all("healthy at 0.1.0", |r| r.healthy_at("0.1.0"))
            .await;
        names
    }

    /// Every composition's release, by composition name, listed through the newest version
    /// the CRD still serves.
    async fn releases(&self) -> BTreeMap<String, Release> {
        for version in self.controllers.keys().rev() {
            let listed = self
                .compositions(version)
                .list(&ListParams::default())
                .await;
            match listed {
                Ok(listed) => {
                    let items = listed.items.iter();
                    return items.map(|o| (o.name_any(), Release::of(o))).collect();
                }
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => panic!("list compositions: {error}"),
            }
        }
        panic!("no version served");
    }

    /// Waits until every release `holds`.
    async fn wait_all(&self, what: &str, holds: impl Fn(&Release) -> bool) {
        support::eventually(what, Duration::from_secs(180), || async {
            let releases = self.releases().await;
            !releases.is_empty() && releases.values().all(&holds)
        })
        .await;
    }

    fn definitions(&self) -> Api<CompositionDefinition> {
        self.fixture.definitions()
    }

    /// The definition's `status.rollout`, once `holds`.
    async fn rollout_once(&self, what: &str, holds: impl Fn(&Value) -> bool) -> Value {
        let mut seen = Value::Null;
        for _ in 0..720 {
            let definition = self.definitions().get("waves").await.unwrap();
            let status = definition.status.unwrap_or_default();
            seen = serde_json::to_value(&status.rollout).unwrap();
            if holds(&seen) {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!("rollout never {what}: {seen}");
    }
}

/// What one composition's status says of its release.
#[derive(Clone, Debug, PartialEq)]
struct Release {
    version_label: String,
    chart: String,
    revision: i64,
    health: String,
    phase: String,
}

impl Release {
    fn of(object: &DynamicObject) -> Release {
        let entry = &object.data["status"]["clusters"][0];
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        Release {
            version_label: object
                .labels()
                .get("compositor.dev/version")
                .cloned()
                .unwrap_or_default(),
            chart: text(&entry["chartVersion"]),
            revision: entry["revision"].as_i64().unwrap_or_default(),
            health: text(&entry["health"]["state"]),
            phase: text(&entry["phase"]),
        }
    }

    fn healthy_at(&self, chart: &str) -> bool {
        self.chart == chart && self.health == "Healthy" && self.phase == "Ready"
    }
}

/// The definition's Ready condition: status, reason, message.
async fn ready_of(api: &Api<CompositionDefinition>) -> (String, String, String) {
    let definition = api.get("waves").await.unwrap();
    let conditions = definition.status.unwrap_or_default().conditions;
    let ready = find_condition(&conditions, "Ready").expect("Ready").clone();
    (ready.status, ready.reason, ready.message)
}

#[tokio::test]
async fn a_bad_version_reaches_the_canary_alone_and_is_rolled_back_then_a_good_one_moves_in_waves()
{
    let rollout = json!({"canary": 1, "maxUnavailable": 2, "healthTimeoutSeconds": 60});
    let Some(mut fleet) = Fleet::new("waves-back", rollout).await else {
        return;
    };
    // Version listings trusted for 1 s and a resync every 2 s: a range follows a release soon.
    let fast = ["--chart-poll-seconds", "1", "--resync-seconds", "2"];
    let namespace = fleet.fixture.namespace.clone();
    fleet.fixture.operator = support::Process::operator_with(&namespace, &fast);
    fleet.publish(&["0.1.0"]);
    let names = fleet.healthy_at_0_1_0("<0.3.0", 6).await;
    let before = fleet.releases().await;

    // A release whose pods never start, which the range resolves to: the canary moves alone,
    // fails, and comes back.
    fleet.publish(&["0.2.0"]);
    fleet.serve("v0-2-0").await;
    let rolled_back = fleet
        .rollout_once("RolledBack", |r| r["phase"] == "RolledBack")
        .await;
    assert_eq!(rolled_back["from"], "0.1.0", "{rolled_back}");
    assert_eq!(rolled_back["to"], "0.2.0", "{rolled_back}");
    let failed = &rolled_back["failed"][0];
    let canary = format!("{}/{}", fleet.namespace, names[0]);
    assert_eq!(failed["composition"], canary, "{rolled_back}");
    let reason = failed["reason"].as_str().unwrap();
    assert!(reason.starts_with("Unhealthy: "), "{reason}");
    assert!(reason.contains("ErrImageNeverPull"), "{reason}");
    fleet
        .wait_all("back on 0.1.0 and healthy", |r| {
            r.healthy_at("0.1.0") && r.version_label == "v0-1-0"
        })
        .await;
    let after = fleet.releases().await;
    assert_eq!(after[&names[0]].revision, 3, "up, then back: {after:?}");
    for name in &names[1..] {
        assert_eq!(after[name], before[name], "{name} never moved");
    }
    // A failed request of the last reconcile may stand on Ready until the next one.
    let definitions = fleet.definitions();
    support::eventually(
        "Ready says RolloutRolledBack",
        Duration::from_secs(30),
        || async { ready_of(&definitions).await.1 == "RolloutRolledBack" },
    )
    .await;
    let (status, reason, message) = ready_of(&definitions).await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "RolloutRolledBack")
    );
    assert!(
        message.starts_with("chart 0.1.0 → 0.2.0 rolled back to 0.1.0: "),
        "{message}"
    );
    assert!(message.contains(&canary), "{message}");
    let notes = event_notes(
        &fleet.fixture.client,
        &fleet.fixture.namespace,
        "RolloutRolledBack",
    );
    assert!(notes.await.iter().any(|n| n.contains(&canary)));

    // The failed version is not tried again by itself, though the range resolves to it at
    // every resync.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(fleet.releases().await, after, "nothing moved again");
    let definition = fleet.definitions().get("waves").await.unwrap();
    let status = definition.status.unwrap();
    assert_eq!(status.chart.unwrap().version, "0.1.0", "0.1.0 is served");

    // A healthy version moves in waves: never more than the canary and maxUnavailable
    // releases on their way at once.
    fleet.publish(&["0.3.0"]);
    fleet.apply("0.3.0", json!({})).await;
    fleet.serve("v0-3-0").await;
    let mut most_unavailable = 0;
    loop {
        let releases = fleet.releases().await;
        let unavailable = releases
            .values()
            .filter(|r| r.version_label != "v0-1-0" || r.chart != "0.1.0")
            .filter(|r| !r.healthy_at("0.3.0"))
            .count();
        most_unavailable = most_unavailable.max(unavailable);
        if releases.values().all(|r| r.healthy_at("0.3.0")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        most_unavailable <= 3,
        "{most_unavailable} releases on their way at once"
    );
    let complete = fleet
        .rollout_once("Complete", |r| r["phase"] == "Complete")
        .await;
    assert_eq!(
        (&complete["moved"], &complete["healthy"], &complete["total"]),
        (&json!(6), &json!(6), &json!(6)),
        "{complete}"
    );
    let done = fleet.releases().await;
    assert_eq!(done[&names[0]].revision, 4, "{done:?}");
    for name in &names[1..] {
        assert_eq!(done[name].revision, 2, "{name}: one upgrade: {done:?}");
    }
    let (status, reason, _) = ready_of(&fleet.definitions()).await;
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Ready"));
    let listed = fleet
        .compositions("v0-3-0")
        .list(&ListParams::default())
        .await;
    for object in listed.unwrap().items {
        let annotations = object.annotations();
        assert!(
            !annotations.contains_key("compositor.dev/move-clusters"),
            "a complete rollout's annotations go: {annotations:?}"
        );
    }
}

#[tokio::test]
async fn halt_leaves_the_canary_and_a_killed_operator_resumes_the_next_rollout() {
    let rollout = json!({"canary": 1, "maxUnavailable": 1, "onFailure": "Halt"});
    let Some(mut fleet) = Fleet::new("waves-halt", rollout).await else {
        return;
    };
    fleet.publish(&["0.1.0", "0.2.0", "0.3.0"]);
    let names = fleet.healthy_at_0_1_0("0.1.0", 4).await;

    fleet.apply("0.2.0", json!({})).await;
    fleet.serve("v0-2-0").await;
    let halted = fleet
        .rollout_once("Halted", |r| r["phase"] == "Halted")
        .await;
    assert_eq!(halted["moved"], 1, "{halted}");
    let releases = fleet.releases().await;
    let canary = &releases[&names[0]];
    assert_eq!(
        (canary.chart.as_str(), canary.health.as_str()),
        ("0.2.0", "Unhealthy")
    );
    for name in &names[1..] {
        assert_eq!(releases[name].chart, "0.1.0", "{name} untouched");
    }
    let (status, reason, _) = ready_of(&fleet.definitions()).await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "RolloutHalted")
    );

    // A fixed version, with the operator killed once the first release after the canary moved.
    fleet.apply("0.3.0", json!({})).await;
    fleet.serve("v0-3-0").await;
    fleet
        .rollout_once("past the canary", |r| {
            r["to"] == "0.3.0" && r["moved"].as_i64().unwrap_or_default() >= 2
        })
        .await;
    fleet.fixture.operator.crash();
    tokio::time::sleep(Duration::from_secs(2)).await;
    fleet.fixture.operator = support::Process::operator(&fleet.fixture.namespace);
    fleet
        .rollout_once("Complete", |r| {
            r["to"] == "0.3.0" && r["phase"] == "Complete"
        })
        .await;
    let done = fleet.releases().await;
    assert_eq!(done[&names[0]].revision, 3, "0.1.0, 0.2.0, 0.3.0: {done:?}");
    for name in &names[1..] {
        let release = &done[name];
        assert!(release.healthy_at("0.3.0"), "{name}: {release:?}");
        assert_eq!(release.revision, 2, "{name} moved once: {done:?}");
    }
}
