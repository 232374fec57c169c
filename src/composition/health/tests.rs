use serde_json::{Value, json};

use super::*;

/// One row of `cases.json`: an object of `apiVersion` and `kind` (its spec, status and
/// metadata in `object`), the verdict it must get, and words its message must hold.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Case {
    api_version: String,
    kind: String,
    object: Value,
    health: String,
    says: String,
}

#[test]
fn every_kind_is_judged_as_the_table_says() {
    let cases: Vec<Case> = serde_json::from_str(include_str!("cases.json")).unwrap();
    for case in cases {
        let mut object = json!({"apiVersion": case.api_version, "kind": case.kind,
                                "metadata": {"name": "x"}});
        for (key, value) in case.object.as_object().unwrap() {
            object[key] = value.clone();
        }
        let object: DynamicObject = serde_json::from_value(object).unwrap();
        let (health, message) = match judge(&object, &Checks::default()) {
            Health::Current => ("Current", String::new()),
            Health::InProgress(why) => ("InProgress", why),
            Health::Failed(why) => ("Failed", why),
        };
        let row = format!("{} {}", case.kind, case.object);
        assert_eq!(health, case.health, "{row}: {message}");
        assert!(
            message.contains(&case.says),
            "{row}: {message:?} lacks {:?}",
            case.says
        );
    }
}

/// An object of a release `web` in namespace `team` on cluster `local`.
fn released(kind: &str, name: &str, version: &str, rest: Value) -> DynamicObject {
    let api_version = match kind {
        "Pod" => "v1",
        "Job" => "batch/v1",
        _ => "apps/v1",
    };
    let mut object = json!({
        "apiVersion": api_version, "kind": kind,
        "metadata": {"name": name, "namespace": "team", "uid": format!("uid-{name}"),
                     "resourceVersion": version,
                     "annotations": {"meta.helm.sh/release-name": "web",
                                     "meta.helm.sh/release-namespace": "team"}},
    });
    for (key, value) in rest.as_object().unwrap() {
        object[key] = value.clone();
    }
    serde_json::from_value(object).unwrap()
}

fn deployment(name: &str, version: &str, available: i64) -> DynamicObject {
    released(
        "Deployment",
        name,
        version,
        json!({"spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}},
               "status": {"replicas": 1, "updatedReplicas": 1, "readyReplicas": available,
                          "availableReplicas": available}}),
    )
}

fn pod(name: &str, app: &str, waiting: &str) -> DynamicObject {
    let mut pod = released(
        "Pod",
        name,
        "1",
        json!({"status": {"phase": "Pending", "containerStatuses": [{"name": "app", "ready": false,
               "restartCount": 0, "state": {"waiting": {"reason": waiting, "message": "said"}}}]}}),
    );
    pod.metadata.annotations = None;
    pod.metadata.labels = Some([("app".to_string(), app.to_string())].into());
    pod
}

fn release() -> ReleaseKey {
    ("local".into(), "team".into(), "web".into())
}

#[test]
fn a_workload_fails_with_the_words_of_a_pod_it_selects_and_recovers() {
    let view = View::default();
    assert_eq!(
        view.saw("local", &deployment("api", "5", 0)),
        Some(release())
    );
    assert!(
        matches!(view.verdict(&release()), Verdict::Progressing(m) if m == "Deployment team/api: 0/1 available")
    );

    assert!(
        view.pod("local", &pod("other-1", "other", "ErrImagePull"))
            .is_empty(),
        "not its pod"
    );
    assert_eq!(
        view.pod("local", &pod("api-1", "api", "ErrImagePull")),
        [release()]
    );
    assert_eq!(
        view.verdict(&release()),
        Verdict::Unhealthy(
            "Deployment team/api: pod api-1: container app: ErrImagePull: said".into()
        )
    );

    assert_eq!(
        view.saw("local", &deployment("api", "4", 1)),
        None,
        "an older event than one seen is not taken"
    );
    assert_eq!(
        view.saw("local", &deployment("api", "6", 1)),
        Some(release())
    );
    assert_eq!(view.verdict(&release()), Verdict::Healthy);
    assert_eq!(
        view.saw("local", &deployment("api", "7", 1)),
        None,
        "no change, no wake"
    );
}

#[test]
fn progress_names_the_first_objects_and_a_relist_forgets_the_gone() {
    let view = View::default();
    for name in ["a", "b", "c", "d"] {
        view.saw("local", &deployment(name, "1", 0));
    }
    let Verdict::Progressing(message) = view.verdict(&release()) else {
        panic!("progressing");
    };
    assert!(
        message.starts_with("Deployment team/a: 0/1 available; Deployment team/b"),
        "{message}"
    );
    assert!(message.ends_with(" (and 1 more)"), "{message}");

    let relisted = ["uid-a".to_string()].into();
    let everywhere = |_: Option<&str>, _: &str| true;
    assert_eq!(
        view.relisted("local", "apps/Deployment", everywhere, &relisted),
        [release()]
    );
    assert!(
        matches!(view.verdict(&release()), Verdict::Progressing(m) if m == "Deployment team/a: 0/1 available")
    );
    assert_eq!(view.gone("local", "uid-a"), Some(release()));
    assert_eq!(view.verdict(&release()), Verdict::Healthy);
}
