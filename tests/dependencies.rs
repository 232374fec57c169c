//! `spec.dependsOn`: a composition waits for those it names, a circle of waits installs
//! nothing, another namespace cannot be named, and a deleted composition goes after those that
//! depend on it, or once its bounded wait is over; a composition of another kind is found in
//! the namespace or as the one whose release made it (a Tenant), and only then is it read.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Namespace};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};

use support::definitions::{
    Fixture, any_object_crd, can_i, helm_has, ready_of as ready_reason, run_controller,
    run_controller_with, wait_status,
};
use support::operator::{CONTROLLER_1_1_5, merge_patch, phase_is};

/// How long a deleted composition waits for its dependents here.
const DEPENDENTS_TIMEOUT: &str = "4";

/// FireworksApp `name` waiting for `needs` (name, and namespace when given).
fn app(fixture: &Fixture, name: &str, needs: &[(&str, Option<&str>)]) -> DynamicObject {
    let mut app = fixture.fireworksapp(name, "acme");
    let needs: Vec<Value> = needs
        .iter()
        .map(|(need, namespace)| match namespace {
            Some(namespace) => {
                json!({"kind": "FireworksApp", "name": need, "namespace": namespace})
            }
            None => json!({"kind": "FireworksApp", "name": need}),
        })
        .collect();
    app.data["spec"]["dependsOn"] = json!(needs);
    app
}

fn reason_is(reason: &'static str) -> impl Fn(&Value) -> bool {
    move |status| ready_reason(status).0 == reason
}

/// Whether the status has condition `type_` with `value`.
fn condition_is(status: &Value, type_: &str, value: &str) -> bool {
    let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
    conditions
        .iter()
        .any(|c| c["type"] == type_ && c["status"] == value)
}

/// Requests of the controller on the FireworksApp resource, watches aside.
async fn requests_on_apps(controller: &support::Process) -> f64 {
    let keep = |labels: &str| {
        labels.contains(r#"resource="fireworksapps""#) && !labels.contains(r#"verb="watch""#)
    };
    controller
        .metric_where("compositor_api_requests_total", keep)
        .await
}

#[tokio::test]
async fn a_composition_waits_for_what_it_depends_on_and_a_circle_installs_nothing() {
    let fixture = Fixture::new("dep").await;
    fixture.fireworksapp_ready("1.1.5").await;
    let timeout = ["--dependents-timeout", DEPENDENTS_TIMEOUT];
    let (controller, _cache) = run_controller_with(&fixture, CONTROLLER_1_1_5, &timeout).await;
    let team = support::namespace(&fixture.client, "dep-team").await;
    let apps = fixture.fireworksapps("v1-1-5", &team);
    let create = |object: DynamicObject| {
        let apps = apps.clone();
        async move {
            apps.create(&PostParams::default(), &object)
                .await
                .expect("composition");
        }
    };

    // Created before what it waits for: nothing is installed, and it says why.
    create(app(&fixture, "web", &[("db", None)])).await;
    let waiting = reason_is("DependencyNotReady");
    let status = wait_status(&apps, "web", "waiting for db", waiting, &controller).await;
    let (_, message) = ready_reason(&status);
    assert_eq!(
        message,
        format!("waiting for FireworksApp {team}/db: absent")
    );
    assert!(!helm_has("web", &team), "no release before db is Ready");

    create(app(&fixture, "db", &[])).await;
    wait_status(&apps, "db", "Ready", phase_is("Ready"), &controller).await;
    let db_ready = Instant::now();
    wait_status(&apps, "web", "Ready", phase_is("Ready"), &controller).await;
    println!(
        "web Ready {:.1}s after db (its install included)",
        db_ready.elapsed().as_secs_f64()
    );
    assert!(helm_has("web", &team));
    let status = apps.get("web").await.unwrap().data["status"].clone();
    assert!(
        condition_is(&status, "DependenciesReady", "True"),
        "{status}"
    );

    assert_a_dependency_not_ready_later_is_a_warning(&apps, &controller, &team).await;
    assert_many_wait_without_polling(&fixture, &apps, &controller).await;

    // Two and three compositions waiting for each other: none installs, each says the circle.
    create(app(&fixture, "c1", &[("c2", None)])).await;
    create(app(&fixture, "c2", &[("c1", None)])).await;
    create(app(&fixture, "c3", &[("c4", None)])).await;
    create(app(&fixture, "c4", &[("c5", None)])).await;
    create(app(&fixture, "c5", &[("c3", None)])).await;
    let circle = reason_is("DependencyCycle");
    for (name, says) in [
        ("c1", "FireworksApp c1 → FireworksApp c2 → FireworksApp c1"),
        ("c2", "FireworksApp c2 → FireworksApp c1 → FireworksApp c2"),
        (
            "c4",
            "FireworksApp c4 → FireworksApp c5 → FireworksApp c3 → FireworksApp c4",
        ),
    ] {
        let status = wait_status(&apps, name, "a circle", &circle, &controller).await;
        let (_, message) = ready_reason(&status);
        assert!(message.contains(says), "{name}: {message}");
        assert!(!helm_has(name, &team), "{name} installs nothing");
    }

    // Another namespace's composition cannot be waited on.
    create(app(&fixture, "nosy", &[("db", Some("kube-system"))])).await;
    let refused = reason_is("DependencyNotAllowed");
    let status = wait_status(&apps, "nosy", "refused", refused, &controller).await;
    let (_, message) = ready_reason(&status);
    assert!(
        message.starts_with("spec.dependsOn[0].namespace: kube-system is not"),
        "{message}"
    );
    assert!(!helm_has("nosy", &team));
    // Nor reached by a name that is a path.
    let path = "db/../../../../kube-system/fireworksapps/db";
    create(app(&fixture, "sneaky", &[(path, None)])).await;
    let status = wait_status(
        &apps,
        "sneaky",
        "refused",
        reason_is("DependencyNotAllowed"),
        &controller,
    )
    .await;
    let (_, message) = ready_reason(&status);
    assert!(message.starts_with("spec.dependsOn[0].name: "), "{message}");

    assert_deleted_after_its_dependents(&apps, &controller, &team).await;
    assert_deletion_waits_no_longer_than_its_bound(&fixture, &apps, &controller, &team).await;
}

/// `db` deleted while `web` needs it stays until `web` is gone.
async fn assert_deleted_after_its_dependents(
    apps: &Api<DynamicObject>,
    controller: &support::Process,
    team: &str,
) {
    apps.delete("db", &DeleteParams::default())
        .await
        .expect("delete db");
    let waiting = reason_is("DependentsExist");
    let status = wait_status(apps, "db", "waiting for web", waiting, controller).await;
    let (_, message) = ready_reason(&status);
    assert!(
        message.starts_with(&format!(
            "waiting for FireworksApp {team}/web to be deleted"
        )),
        "{message}"
    );
    assert!(helm_has("db", team), "db stays while web needs it");
    apps.delete("web", &DeleteParams::default())
        .await
        .expect("delete web");
    let web_deleted = Instant::now();
    support::eventually("db gone", Duration::from_secs(30), || async {
        apps.get_opt("db").await.unwrap().is_none()
    })
    .await;
    println!(
        "db gone {:.1}s after web was deleted",
        web_deleted.elapsed().as_secs_f64()
    );
    assert!(!helm_has("db", team) && !helm_has("web", team));
}

/// `base` deleted while `top` needs it goes once the bounded wait is over, with an event; `top`
/// keeps its release.
async fn assert_deletion_waits_no_longer_than_its_bound(
    fixture: &Fixture,
    apps: &Api<DynamicObject>,
    controller: &support::Process,
    team: &str,
) {
    for object in [
        app(fixture, "base", &[]),
        app(fixture, "top", &[("base", None)]),
    ] {
        let name = object.metadata.name.clone().unwrap();
        apps.create(&PostParams::default(), &object)
            .await
            .expect("composition");
        wait_status(apps, &name, "Ready", phase_is("Ready"), controller).await;
    }
    apps.delete("base", &DeleteParams::default())
        .await
        .expect("delete base");
    support::eventually("base gone", Duration::from_secs(30), || async {
        apps.get_opt("base").await.unwrap().is_none()
    })
    .await;
    assert!(!helm_has("base", team));
    assert!(
        helm_has("top", team),
        "a dependent is never uninstalled for it"
    );
    let events = Api::<Event>::namespaced(fixture.client.clone(), team);
    let listed = events.list(&ListParams::default()).await.unwrap();
    let timed_out = listed
        .items
        .iter()
        .find(|e| e.reason.as_deref() == Some("DependentsTimedOut"))
        .expect("a DependentsTimedOut event");
    let note = timed_out.message.clone().unwrap_or_default();
    assert!(
        note.contains(&format!("FireworksApp {team}/top, which depend on it")),
        "{note}"
    );
}

/// `db` paused (no longer Ready) leaves `web` installed and Ready, its DependenciesReady
/// condition saying so; resumed, it says so again.
async fn assert_a_dependency_not_ready_later_is_a_warning(
    apps: &Api<DynamicObject>,
    controller: &support::Process,
    team: &str,
) {
    let paused =
        |value: Value| json!({"metadata": {"annotations": {"compositor.dev/paused": value}}});
    merge_patch(apps, "db", paused(json!("true"))).await;
    let warned = |s: &Value| condition_is(s, "DependenciesReady", "False");
    let status = wait_status(apps, "web", "warned", warned, controller).await;
    assert!(condition_is(&status, "Ready", "True"), "{status}");
    let conditions = status["conditions"].as_array().unwrap();
    let warning = conditions
        .iter()
        .find(|c| c["type"] == "DependenciesReady")
        .unwrap();
    let message = warning["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("FireworksApp {team}/db: Paused")),
        "{message}"
    );
    assert!(helm_has("web", team));
    merge_patch(apps, "db", paused(Value::Null)).await;
    let again = |s: &Value| condition_is(s, "DependenciesReady", "True");
    wait_status(apps, "web", "Ready again", again, controller).await;
}

/// Many compositions waiting for `hub` make no request while they wait, and all install once
/// it is Ready.
async fn assert_many_wait_without_polling(
    fixture: &Fixture,
    apps: &Api<DynamicObject>,
    controller: &support::Process,
) {
    let names: Vec<String> = (0..MANY).map(|i| format!("many-{i}")).collect();
    for name in &names {
        apps.create(
            &PostParams::default(),
            &app(fixture, name, &[("hub", None)]),
        )
        .await
        .expect("composition");
    }
    for name in &names {
        let waiting = reason_is("DependencyNotReady");
        wait_status(apps, name, "waiting for hub", waiting, controller).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = requests_on_apps(controller).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let waited = requests_on_apps(controller).await - before;
    assert_eq!(waited, 0.0, "no request while {MANY} compositions wait");
    let requests = requests_on_apps(controller).await;
    apps.create(&PostParams::default(), &app(fixture, "hub", &[]))
        .await
        .expect("hub");
    wait_status(apps, "hub", "Ready", phase_is("Ready"), controller).await;
    let hub_ready = Instant::now();
    for name in &names {
        wait_status(apps, name, "Ready", phase_is("Ready"), controller).await;
    }
    let made = requests_on_apps(controller).await - requests;
    println!(
        "{MANY} dependents Ready {:.1}s after hub was seen Ready; {made} requests on the \
         resource from hub's creation on, its own install included ({:.1} per composition)",
        hub_ready.elapsed().as_secs_f64(),
        made / (MANY + 1) as f64,
    );
}

/// How many compositions wait for one.
const MANY: usize = 50;

/// Whether the FireworksApp controller may list compositions of kind `plural`.
async fn apps_controller_lists(fixture: &Fixture, plural: &str) -> bool {
    can_i(
        fixture,
        CONTROLLER_1_1_5,
        "list",
        &fixture.group,
        plural,
        None,
    )
    .await
}

#[tokio::test]
async fn a_composition_waits_for_the_tenant_whose_release_made_its_namespace() {
    let fixture = Fixture::new("depk").await;
    fixture.fireworksapp_ready("1.1.5").await;
    // A Tenant-like kind of the same group, served at a version of its own: each one installs
    // into a namespace named after it.
    let spec = json!({
        "chart": {
            "url": support::env("COMPOSITOR_TEST_REPO_URL"), "repo": "fireworks-app",
            "version": "1.1.6",
            "credentials": {"username": support::env("COMPOSITOR_TEST_REPO_USERNAME"),
                            "passwordRef": {"name": "repo-password", "key": "password"}},
        },
        "names": {"group": fixture.group, "kind": "Base"},
        "placement": {"namespace": "CompositionName"},
    });
    support::apply_definition(&fixture.client, &fixture.namespace, "base", spec).await;
    fixture.wait_condition("base", "Ready", "True").await;
    let (controller, _cache) = run_controller(&fixture, CONTROLLER_1_1_5).await;
    let (bases_controller, _bases_cache) = run_controller(&fixture, BASES_CONTROLLER).await;
    let platform = support::namespace(&fixture.client, "depk-platform").await;
    let bases = fixture.compositions("Base", "bases", "v1-1-6", &platform);
    assert!(
        !apps_controller_lists(&fixture, "bases").await,
        "nothing of another kind before a composition names it"
    );

    // The tenant, paused: its namespace is made, its release not yet.
    let team = support::unique("depk-team");
    let mut base = fixture.fireworksapp_at("v1-1-6", &team, json!({"git": {"repository": "base"}}));
    base.types.as_mut().unwrap().kind = "Base".into();
    base.metadata.annotations = Some([("compositor.dev/paused".into(), "true".into())].into());
    bases.create(&PostParams::default(), &base).await.unwrap();
    let namespaces = Api::<Namespace>::all(fixture.client.clone());
    support::eventually("its namespace", Duration::from_secs(30), || async {
        namespaces.get_opt(&team).await.unwrap().is_some()
    })
    .await;

    let apps = fixture.fireworksapps("v1-1-5", &team);
    let mut web = fixture.fireworksapp("web", "acme");
    web.data["spec"]["dependsOn"] = json!([{"kind": "Base", "name": team}]);
    apps.create(&PostParams::default(), &web).await.unwrap();
    let waiting = reason_is("DependencyNotReady");
    let status = wait_status(&apps, "web", "waiting for its tenant", waiting, &controller).await;
    let (_, message) = ready_reason(&status);
    assert!(message.starts_with("waiting for Base "), "{message}");
    assert!(
        !helm_has("web", &team),
        "no release before its tenant is Ready"
    );
    support::eventually("bases readable", Duration::from_secs(30), || {
        apps_controller_lists(&fixture, "bases")
    })
    .await;

    merge_patch(
        &bases,
        &team,
        json!({"metadata": {"annotations": {"compositor.dev/paused": null}}}),
    )
    .await;
    wait_status(&bases, &team, "Ready", phase_is("Ready"), &bases_controller).await;
    let tenant_ready = Instant::now();
    wait_status(&apps, "web", "Ready", phase_is("Ready"), &controller).await;
    println!(
        "web Ready {:.1}s after its tenant (its install included)",
        tenant_ready.elapsed().as_secs_f64()
    );
    assert!(helm_has("web", &team));
    let status = apps.get("web").await.unwrap().data["status"].clone();
    assert!(
        condition_is(&status, "DependenciesReady", "True"),
        "{status}"
    );
    let (_, message) = ready_reason(&status);
    assert!(!message.contains("waiting"), "{message}");

    assert_only_this_namespaces_tenant_and_served_kinds(&fixture, &apps, &controller, &team).await;
}

/// The tenant of `team` is not found from another namespace, and a kind the group does not
/// serve is refused.
async fn assert_only_this_namespaces_tenant_and_served_kinds(
    fixture: &Fixture,
    apps: &Api<DynamicObject>,
    controller: &support::Process,
    team: &str,
) {
    // From another namespace the same tenant is not there to be found, though it exists.
    let other = support::namespace(&fixture.client, "depk-other").await;
    let others = fixture.fireworksapps("v1-1-5", &other);
    let mut nosy = fixture.fireworksapp("nosy", "acme");
    nosy.data["spec"]["dependsOn"] = json!([{"kind": "Base", "name": team}]);
    others.create(&PostParams::default(), &nosy).await.unwrap();
    let status = wait_status(
        &others,
        "nosy",
        "not found",
        reason_is("DependencyNotReady"),
        controller,
    )
    .await;
    let (_, message) = ready_reason(&status);
    assert_eq!(message, format!("waiting for Base {other}/{team}: absent"));

    // A kind the group does not serve is refused, naming the field.
    let mut typo = fixture.fireworksapp("typo", "acme");
    typo.data["spec"]["dependsOn"] = json!([{"kind": "Bsae", "name": team}]);
    apps.create(&PostParams::default(), &typo).await.unwrap();
    let refused = reason_is("DependencyNotAllowed");
    let status = wait_status(apps, "typo", "refused", refused, controller).await;
    let (_, message) = ready_reason(&status);
    assert!(
        message.starts_with("spec.dependsOn[0].kind: Bsae is not a kind of "),
        "{message}"
    );
    assert!(!helm_has("typo", team));

    // A kind of the group whose CRD compositor did not make is no composition: never granted,
    // so whether such an object exists is not learnt either.
    let foreign = any_object_crd(&fixture.group, "v1", "Widget");
    support::apply_crd(&fixture.client, foreign).await;
    let mut widget = fixture.fireworksapp("widget", "acme");
    widget.data["spec"]["dependsOn"] = json!([{"kind": "Widget", "name": "w"}]);
    apps.create(&PostParams::default(), &widget).await.unwrap();
    let status = wait_status(
        apps,
        "widget",
        "waiting",
        reason_is("DependencyNotReady"),
        controller,
    )
    .await;
    let (_, message) = ready_reason(&status);
    assert!(
        message.contains("not readable by this controller yet"),
        "{message}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !apps_controller_lists(fixture, "widgets").await,
        "a foreign kind is never granted"
    );
}

/// The controller of the Tenant-like kind.
const BASES_CONTROLLER: &str = "bases-v1-1-6-controller";
