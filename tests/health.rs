//! Ready means running: on the test bed's node, a composition is Ready only once what its
//! release runs is healthy, says why when it is not, in the kubelet's words, and is Ready again
//! once fixed. The node has one image, its pause image, which the chart here runs.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use support::definitions::{Fixture, reason_of, run_controller, wait_status};

/// The node's one image.
const PAUSE: &str = "localhost/pause:3.10";

/// A chart of a Deployment of `image` (never pulled) with `replicas` and, when set, `command`
/// and `args`;
/// and with `job`, a Job of the same container that is not retried.
fn health_chart() -> String {
    let name = support::unique("health");
    let deployment = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: '{{ .Release.Name }}-web'}
spec:
  replicas: {{ .Values.replicas }}
  selector: {matchLabels: {app: '{{ .Release.Name }}-web'}}
  template:
    metadata: {labels: {app: '{{ .Release.Name }}-web'}}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
        - name: web
          image: {{ .Values.image | quote }}
          imagePullPolicy: Never
          {{- with .Values.command }}
          command: {{ toJson . }}
          {{- end }}
          {{- with .Values.args }}
          args: {{ toJson . }}
          {{- end }}
{{- if .Values.job }}
---
apiVersion: batch/v1
kind: Job
metadata: {name: '{{ .Release.Name }}-once'}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: once
          image: {{ .Values.image | quote }}
          imagePullPolicy: Never
          command: {{ toJson .Values.job.command }}
{{- end }}
{{- if .Values.stateful }}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: '{{ .Release.Name }}-db'}
spec:
  replicas: 1
  serviceName: '{{ .Release.Name }}-db'
  selector: {matchLabels: {app: '{{ .Release.Name }}-db'}}
  template:
    metadata: {labels: {app: '{{ .Release.Name }}-db'}}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
        - name: db
          image: {{ .Values.image | quote }}
          imagePullPolicy: Never
{{- end }}
"#;
    let values =
        format!("replicas: 1\nimage: {PAUSE}\ncommand: []\nargs: []\njob: null\nstateful: false\n");
    let chart = format!("apiVersion: v2\nname: {name}\nversion: 0.1.0\n");
    support::publish_chart(
        &name,
        &[
            ("Chart.yaml", &chart),
            ("values.yaml", &values),
            ("templates/workloads.yaml", deployment),
        ],
    )
}

/// A definition of the health chart that waits for health, its controller, and a namespace.
struct Bed {
    fixture: Fixture,
    definition: compositor::api::CompositionDefinition,
    controller: support::Process,
    namespace: String,
    _cache: tempfile::TempDir,
}

impl Bed {
    /// `None` without a node: nothing runs there, so nothing is ever healthy.
    async fn new(prefix: &str) -> Option<Bed> {
        if support::node().is_none() {
            eprintln!("no node in this test bed: what a release runs never runs");
            return None;
        }
        Some(Bed::of(prefix, &health_chart()).await)
    }

    /// The same of the chart at `url`, with or without a node.
    async fn of(prefix: &str, url: &str) -> Bed {
        let fixture = Fixture::new(prefix).await;
        let health = json!({"health": {"mode": "Wait", "timeoutSeconds": 120}});
        let definition = fixture.define("health", url, health).await;
        let status = definition.status.clone().unwrap();
        let (controller, cache) = run_controller(&fixture, &status.versions[0].controller).await;
        let namespace = support::namespace(&fixture.client, prefix).await;
        Bed {
            fixture,
            definition,
            controller,
            namespace,
            _cache: cache,
        }
    }

    async fn create(&self, name: &str, spec: Value) -> Api<DynamicObject> {
        let (definition, namespace) = (&self.definition, &self.namespace);
        self.fixture
            .create_with(definition, namespace, name, spec)
            .await
    }

    /// The status once Ready has `reason` (and `status`).
    async fn ready_is(
        &self,
        api: &Api<DynamicObject>,
        name: &str,
        (status, reason): (&str, &str),
    ) -> Value {
        let holds = |s: &Value| {
            let ready = s["conditions"].as_array().into_iter().flatten();
            let mut ready = ready.filter(|c| c["type"] == "Ready");
            ready.any(|c| c["status"] == status && c["reason"] == reason)
        };
        let what = format!("Ready {status} {reason}");
        wait_status(api, name, &what, holds, &self.controller).await
    }
}

/// The reasons and notes of `name`'s events, `Reason: note`, once there is one with `reason`
/// (or after a few seconds).
async fn events_of(bed: &Bed, name: &str, reason: &str) -> Vec<String> {
    let events = Api::<Event>::namespaced(bed.fixture.client.clone(), &bed.namespace);
    let mut said = Vec::new();
    for _ in 0..40 {
        let listed = events.list(&ListParams::default()).await.unwrap();
        said = listed
            .items
            .into_iter()
            .filter(|e| e.involved_object.name.as_deref() == Some(name))
            .map(|e| {
                format!(
                    "{}: {}",
                    e.reason.unwrap_or_default(),
                    e.message.unwrap_or_default()
                )
            })
            .collect();
        if said.iter().any(|e| e.starts_with(reason)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    said
}

/// The time of the Ready condition in `conditions`.
fn ready_since(conditions: &Value) -> String {
    let ready = conditions.as_array().into_iter().flatten();
    let mut ready = ready.filter(|c| c["type"] == "Ready");
    ready
        .find_map(|c| c["lastTransitionTime"].as_str().map(String::from))
        .unwrap_or_default()
}

#[tokio::test]
async fn a_composition_is_ready_only_once_its_pod_is() {
    let Some(bed) = Bed::new("health-runs").await else {
        return;
    };
    let name = support::unique("web");
    let api = bed.create(&name, json!({})).await;
    let status = bed.ready_is(&api, &name, ("True", "Ready")).await;
    assert_eq!(
        status["clusters"][0]["health"]["state"], "Healthy",
        "{status}"
    );
    assert_eq!(status["readyClusters"], "1/1", "{status}");

    let pods = Api::<Pod>::namespaced(bed.fixture.client.clone(), &bed.namespace);
    let selector = format!("app={name}-web");
    let pods = pods.list(&ListParams::default().labels(&selector)).await;
    let pod = pods.unwrap().items.pop().expect("the Deployment's pod");
    let pod_ready = ready_since(&json!(pod.status.unwrap().conditions));
    let composition_ready = ready_since(&status["conditions"]);
    println!("pod Ready at {pod_ready}; composition Ready at {composition_ready}");
    assert!(
        !pod_ready.is_empty() && composition_ready >= pod_ready,
        "the composition is Ready ({composition_ready}) no sooner than its pod ({pod_ready})"
    );
    let events = events_of(&bed, &name, "Progressing").await;
    assert!(
        events.iter().any(|e| e.starts_with("Progressing")),
        "it said it was progressing before: {events:?}"
    );
}

#[tokio::test]
async fn a_container_that_cannot_start_is_unhealthy_in_the_kubelets_words_until_fixed() {
    let Some(bed) = Bed::new("health-start").await else {
        return;
    };
    let name = support::unique("broken");
    let api = bed
        .create(&name, json!({"command": ["/nonexistent"]}))
        .await;
    let status = bed.ready_is(&api, &name, ("False", "Unhealthy")).await;
    let said = reason_of(&status, "Ready");
    let namespace = &bed.namespace;
    assert!(
        said.contains(&format!(
            "Deployment {namespace}/{name}-web: pod {name}-web-"
        )) && said.contains("container web: ")
            && said.contains("/nonexistent"),
        "names the workload, its pod, its container and the kubelet's words: {said}"
    );
    assert_eq!(
        status["clusters"][0]["health"]["state"], "Unhealthy",
        "{status}"
    );
    assert_eq!(status["readyClusters"], "0/1", "{status}");
    assert_eq!(status["phase"], "Failed", "{status}");
    let events = events_of(&bed, &name, "Unhealthy").await;
    assert!(
        events.iter().any(|e| e.starts_with("Unhealthy")),
        "an event says so: {events:?}"
    );

    let fixed = json!({"spec": {"command": []}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&fixed))
        .await
        .expect("fix the command");
    let status = bed.ready_is(&api, &name, ("True", "Ready")).await;
    assert_eq!(status["clusters"][0]["revision"], 2, "{status}");
}

#[tokio::test]
async fn an_image_the_node_does_not_have_and_a_crash_loop_are_unhealthy() {
    let Some(bed) = Bed::new("health-image").await else {
        return;
    };
    // `pause -v` prints its version and exits: restarted, again and again.
    let looping = support::unique("loop");
    let loops = bed.create(&looping, json!({"args": ["-v"]})).await;
    let name = support::unique("absent");
    let api = bed
        .create(&name, json!({"image": "localhost/absent:0.1"}))
        .await;
    let status = bed.ready_is(&api, &name, ("False", "Unhealthy")).await;
    let said = reason_of(&status, "Ready");
    assert!(
        said.contains("container web: ErrImageNeverPull"),
        "the kubelet's reason: {said}"
    );

    let status = bed.ready_is(&loops, &looping, ("False", "Unhealthy")).await;
    let said = reason_of(&status, "Ready");
    assert!(
        said.contains(&format!("Deployment {}/{looping}-web: pod {looping}-web-", bed.namespace))
            && said.contains(
                "container web: CrashLoopBackOff, restarted more than 3 times; last ended Completed (exit code 0)"
            ),
        "names the loop and how the container last ended: {said}"
    );
}

#[tokio::test]
async fn no_replicas_are_healthy_at_once_and_a_failed_job_is_not() {
    let Some(bed) = Bed::new("health-job").await else {
        return;
    };
    let idle = support::unique("idle");
    let api = bed.create(&idle, json!({"replicas": 0})).await;
    bed.ready_is(&api, &idle, ("True", "Ready")).await;

    let name = support::unique("job");
    let job = json!({"replicas": 0, "job": {"command": ["/nonexistent"]}});
    let api = bed.create(&name, job).await;
    let status = bed.ready_is(&api, &name, ("False", "Unhealthy")).await;
    let said = reason_of(&status, "Ready");
    assert!(
        said.contains(&format!("Job {}/{name}-once: ", bed.namespace)),
        "names the Job: {said}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let again = api.get(&name).await.unwrap();
    let said = reason_of(&again.data["status"], "Ready");
    println!("{said}");
    assert!(
        said.starts_with(&format!("Unhealthy Job {}/{name}-once: ", bed.namespace)),
        "a failed Job stays failed: {said}"
    );
}

#[tokio::test]
async fn a_stateful_set_is_ready_once_its_pod_is() {
    let Some(bed) = Bed::new("health-stateful").await else {
        return;
    };
    let name = support::unique("db");
    let api = bed
        .create(&name, json!({"replicas": 0, "stateful": true}))
        .await;
    let status = bed.ready_is(&api, &name, ("True", "Ready")).await;
    let pods = Api::<Pod>::namespaced(bed.fixture.client.clone(), &bed.namespace);
    let pod = pods.get(&format!("{name}-db-0")).await.expect("its pod");
    let pod_ready = ready_since(&json!(pod.status.unwrap().conditions));
    let composition_ready = ready_since(&status["conditions"]);
    assert!(
        !pod_ready.is_empty() && composition_ready >= pod_ready,
        "Ready ({composition_ready}) no sooner than its pod ({pod_ready})"
    );
}

/// Without a node too: an object of a chart's own kind is as healthy as its conditions say,
/// or as the definition's CEL check of its kind says once there is one (a check that does not
/// compile refuses the definition, in the compiler's words); the composition follows each
/// change within a second or two.
#[tokio::test]
async fn a_custom_object_is_as_healthy_as_its_conditions_or_its_check_say() {
    let (url, widget) = support::charts::widget_chart();
    let bed = Bed::of("health-custom", &url).await;
    let name = support::unique("w");
    let api = bed.create(&name, json!({})).await;
    bed.ready_is(&api, &name, ("True", "Ready")).await;

    let widgets =
        Api::<DynamicObject>::namespaced_with(bed.fixture.client.clone(), &bed.namespace, &widget);
    let conditions = |conditions: Value| json!({"status": {"conditions": conditions}});
    let steps = [
        (
            conditions(
                json!([{"type": "Ready", "status": "False", "reason": "Warming", "message": "cache cold"}]),
            ),
            ("False", "Progressing"),
            "Widget {ns}/{name}: Warming: cache cold",
        ),
        (
            conditions(
                json!([{"type": "Stalled", "status": "True", "reason": "Broken", "message": "disk full"}]),
            ),
            ("False", "Unhealthy"),
            "Widget {ns}/{name}: Broken: disk full",
        ),
        (
            conditions(
                json!([{"type": "Ready", "status": "True", "reason": "Done", "message": ""}]),
            ),
            ("True", "Ready"),
            "",
        ),
    ];
    for (status, ready, says) in steps {
        bed.widget_says(&widgets, &api, &name, (status, ready, says))
            .await;
    }

    let broken =
        json!([{"apiVersion": widget.api_version, "kind": "Widget", "ready": "status.phase =="}]);
    let refused = bed.check_with(broken, "False").await;
    assert_eq!(refused.reason, "InvalidHealthCheck", "{refused:?}");
    assert!(
        refused
            .message
            .starts_with("spec.health.checks[0].ready: ERROR: <input>:1:"),
        "the compiler's words: {refused:?}"
    );

    let running = "has(status.phase) && status.phase == 'Running'";
    let broken = "has(status.phase) && status.phase == 'Broken'";
    let check = json!([{"apiVersion": widget.api_version, "kind": "Widget",
                        "ready": running, "failed": broken}]);
    bed.check_with(check, "True").await;
    let waits = bed.ready_is(&api, &name, ("False", "Progressing")).await;
    let says = format!(
        "Widget {}/{name}: `{running}` does not hold yet",
        bed.namespace
    );
    assert!(reason_of(&waits, "Ready").ends_with(&says), "{waits}");
    let phase = |phase: &str| json!({"status": {"phase": phase}});
    let steps = [
        (phase("Running"), ("True", "Ready"), String::new()),
        (
            phase("Broken"),
            ("False", "Unhealthy"),
            format!("Widget {{ns}}/{{name}}: `{broken}` holds"),
        ),
    ];
    for (status, ready, says) in steps {
        bed.widget_says(&widgets, &api, &name, (status, ready, &says))
            .await;
    }
}

impl Bed {
    /// Patches the widget `name`'s `status`, then waits for the composition to read `ready`
    /// with a message that ends with `says` (`{ns}` and `{name}` filled in).
    async fn widget_says(
        &self,
        widgets: &Api<DynamicObject>,
        api: &Api<DynamicObject>,
        name: &str,
        (status, ready, says): (Value, (&str, &str), &str),
    ) {
        let started = std::time::Instant::now();
        widgets
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .expect("the widget's status");
        let status = self.ready_is(api, name, ready).await;
        println!("{ready:?} after {:?}", started.elapsed());
        let says = says
            .replace("{ns}", &self.namespace)
            .replace("{name}", name);
        assert!(
            reason_of(&status, "Ready").ends_with(&says),
            "{ready:?} says {says:?}: {status}"
        );
    }

    /// Sets the definition's health `checks`, then waits for its Ready to read `ready`.
    async fn check_with(
        &self,
        checks: Value,
        ready: &str,
    ) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        let definitions = Api::<compositor::api::CompositionDefinition>::namespaced(
            self.fixture.client.clone(),
            &self.fixture.namespace,
        );
        let name = self.definition.metadata.name.as_deref().unwrap();
        let patch = json!({"spec": {"health": {"checks": checks}}});
        definitions
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("the definition's checks");
        let mut last = None;
        for _ in 0..120 {
            let definition = definitions.get(name).await.expect("the definition");
            let status = definition.status.unwrap_or_default();
            let generation = definition.metadata.generation;
            let condition = compositor::api::find_condition(&status.conditions, "Ready");
            if let Some(condition) = condition
                && condition.status == ready
                && condition.observed_generation == generation
            {
                return condition.clone();
            }
            last = condition.cloned();
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!("the definition's Ready never {ready}: {last:?}");
    }
}
