//! The Helm engine against the real `helm` and the test charts.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use compositor::helm::{
    Engine, Error, Gate, KubeContext, Release, ReleaseStatus, UpgradeOptions, parse_manifest,
};
use compositor::runtime::Metrics;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use serde_json::{Value, json};

/// The resident engine, as the controllers run it.
fn engine(metrics: &Arc<Metrics>) -> Engine {
    Engine::resident(
        support::env("HELM_ENGINE").into(),
        Duration::from_secs(60),
        metrics.clone(),
    )
}

/// A `helm` process per call.
fn helm_processes(metrics: &Arc<Metrics>) -> Engine {
    Engine::locate(
        Some(support::env("HELM_BIN").into()),
        Duration::from_secs(60),
        metrics.clone(),
    )
    .expect("helm")
}

#[tokio::test]
async fn template_renders_a_chart_offline_and_is_counted() {
    let metrics = Arc::new(Metrics::default());
    let chart = support::packaged_chart("optional-kind", "0.1.0");
    let manifest = engine(&metrics)
        .template(
            &chart,
            "demo",
            "team-a",
            &json!({"networkPolicy": {"enabled": true}}),
        )
        .await
        .expect("template");
    let mut kinds: Vec<_> = parse_manifest(&manifest)
        .expect("manifest")
        .into_iter()
        .map(|o| o.kind)
        .collect();
    kinds.sort();
    assert_eq!(kinds, ["ConfigMap", "NetworkPolicy"]);
    assert_eq!(metrics.helm_calls("template"), 1);
}

#[tokio::test]
async fn a_failing_call_reports_helms_own_words_from_the_engine_and_from_a_helm_process() {
    for runner in [engine, helm_processes] {
        a_failing_call_reports_helms_own_words(runner).await;
    }
}

async fn a_failing_call_reports_helms_own_words(runner: fn(&Arc<Metrics>) -> Engine) {
    let metrics = Arc::new(Metrics::default());
    let chart = support::packaged_chart("fireworks-app", "1.1.5");
    // The chart's schema requires git.repository to match ^[a-z0-9-]+$.
    let error = runner(&metrics)
        .template(
            &chart,
            "demo",
            "team-a",
            &json!({"git": {"repository": "Not Valid"}}),
        )
        .await
        .expect_err("schema violation");
    assert!(
        matches!(
            error,
            Error::Failed {
                verb: "template",
                ..
            }
        ),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("git") && !message.starts_with("Error:"),
        "{message}"
    );
    assert_eq!(error.reason(), "HelmFailed");
    assert_eq!(metrics.helm_calls("template"), 1);
}

/// The test bed's admin kubeconfig, as the controller would hand it over: content, not a path.
fn admin_kubeconfig() -> String {
    std::fs::read_to_string(support::env("KUBECONFIG")).expect("read the test bed kubeconfig")
}

/// The admin kubeconfig with its token replaced by `token`.
fn kubeconfig_with_token(token: &str) -> String {
    let mut config: Value = serde_saphyr::from_str(&admin_kubeconfig()).expect("kubeconfig YAML");
    for user in config["users"].as_array_mut().expect("users") {
        user["user"] = json!({"token": token});
    }
    config.to_string()
}

async fn greeting(client: &kube::Client, namespace: &str, release: &str) -> String {
    let map = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get(&format!("{release}-config"))
        .await
        .expect("the release's ConfigMap");
    map.data.expect("data")["greeting"].clone()
}

fn assert_release(release: &Release, revision: u64, chart_version: &str) {
    assert_eq!(
        (
            release.revision,
            &release.status,
            release.chart_version.as_str()
        ),
        (revision, &ReleaseStatus::Deployed, chart_version),
        "{release:?}"
    );
}

#[tokio::test]
async fn a_release_lives_through_install_upgrades_rollback_recovery_and_uninstall() {
    let client = support::client().await;
    let namespace = support::namespace(&client, "helm-life").await;
    let metrics = Arc::new(Metrics::default());
    let helm = engine(&metrics);
    let target = KubeContext::new(admin_kubeconfig(), &namespace);
    let release = "fw";
    let v115 = support::packaged_chart("fireworks-app", "1.1.5");
    let v116 = support::packaged_chart("fireworks-app", "1.1.6");
    let options = UpgradeOptions::default();

    assert_eq!(helm.status(&target, release).await.expect("status"), None);
    assert!(
        helm.history(&target, release)
            .await
            .expect("history")
            .is_empty()
    );

    let installed = helm
        .upgrade_install(
            &target,
            release,
            &v115,
            &json!({"app": {"greeting": "hi"}}),
            options.clone(),
        )
        .await
        .expect("install");
    assert_release(&installed, 1, "1.1.5");
    assert_eq!(
        (installed.name.as_str(), installed.namespace.as_str()),
        (release, namespace.as_str())
    );
    let kinds: Vec<_> = parse_manifest(&installed.manifest)
        .expect("manifest")
        .into_iter()
        .map(|o| o.kind)
        .collect();
    assert!(kinds.contains(&"ConfigMap".to_string()), "{kinds:?}");
    let status = helm
        .status(&target, release)
        .await
        .expect("status")
        .expect("release");
    assert_eq!(status, installed);
    assert_eq!(greeting(&client, &namespace, release).await, "hi");

    // The values are the whole truth: empty values mean the chart's defaults, not the last ones.
    let upgraded = helm
        .upgrade_install(&target, release, &v115, &json!({}), options.clone())
        .await
        .expect("upgrade values");
    assert_release(&upgraded, 2, "1.1.5");
    assert_eq!(greeting(&client, &namespace, release).await, "hello");

    let upgraded = helm
        .upgrade_install(
            &target,
            release,
            &v116,
            &json!({"app": {"greeting": "again"}}),
            options.clone(),
        )
        .await
        .expect("upgrade chart");
    assert_release(&upgraded, 3, "1.1.6");
    assert_eq!(greeting(&client, &namespace, release).await, "again");

    let history = helm.history(&target, release).await.expect("history");
    let summary: Vec<_> = history
        .iter()
        .map(|r| (r.revision, r.status.clone(), r.chart_version.as_str()))
        .collect();
    assert_eq!(
        summary,
        [
            (1, ReleaseStatus::Superseded, "1.1.5"),
            (2, ReleaseStatus::Superseded, "1.1.5"),
            (3, ReleaseStatus::Deployed, "1.1.6"),
        ]
    );

    helm.rollback(&target, release, 1).await.expect("rollback");
    let rolled_back = helm
        .status(&target, release)
        .await
        .expect("status")
        .expect("release");
    assert_release(&rolled_back, 4, "1.1.5");
    assert_eq!(greeting(&client, &namespace, release).await, "hi");

    // A process that died mid-upgrade leaves the last revision pending; Helm then refuses to
    // upgrade, and the status says so, so that the controller can roll back.
    support::set_stored_status(&client, &namespace, release, 4, "pending-upgrade").await;
    let stuck = helm
        .status(&target, release)
        .await
        .expect("status")
        .expect("release");
    assert_eq!(stuck.status, ReleaseStatus::PendingUpgrade);
    assert!(stuck.status.is_pending());
    let refused = helm
        .upgrade_install(&target, release, &v116, &json!({}), options.clone())
        .await
        .expect_err("upgrade of a pending release");
    assert!(
        matches!(
            refused,
            Error::Failed {
                verb: "upgrade",
                ..
            }
        ),
        "{refused:?}"
    );
    helm.rollback(&target, release, 3)
        .await
        .expect("recovering rollback");
    let recovered = helm
        .status(&target, release)
        .await
        .expect("status")
        .expect("release");
    assert_release(&recovered, 5, "1.1.6");

    assert!(helm.uninstall(&target, release).await.expect("uninstall"));
    assert_eq!(helm.status(&target, release).await.expect("status"), None);
    assert!(
        helm.history(&target, release)
            .await
            .expect("history")
            .is_empty()
    );
    assert!(
        !helm
            .uninstall(&target, release)
            .await
            .expect("second uninstall")
    );
    assert!(
        Api::<ConfigMap>::namespaced(client.clone(), &namespace)
            .get_opt(&format!("{release}-config"))
            .await
            .expect("read ConfigMap")
            .is_none()
    );

    assert_eq!(metrics.helm_calls("upgrade"), 4);
    assert_eq!(metrics.helm_calls("rollback"), 2);
    assert_eq!(metrics.helm_calls("uninstall"), 2);
}

#[tokio::test]
async fn an_install_with_values_the_schema_refuses_names_the_field() {
    let client = support::client().await;
    let namespace = support::namespace(&client, "helm-schema").await;
    let metrics = Arc::new(Metrics::default());
    let target = KubeContext::new(admin_kubeconfig(), &namespace);
    let error = engine(&metrics)
        .upgrade_install(
            &target,
            "bad",
            &support::packaged_chart("fireworks-app", "1.1.5"),
            &json!({"git": {"repository": "Not Valid"}}),
            UpgradeOptions::default(),
        )
        .await
        .expect_err("schema violation");
    let Error::Failed { verb, message } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(*verb, "upgrade");
    assert!(
        message.contains("git") && message.contains("repository") && !message.starts_with("Error:"),
        "{message}"
    );
    assert_eq!(error.reason(), "HelmFailed");
    assert_eq!(
        engine(&metrics)
            .status(&target, "bad")
            .await
            .expect("status"),
        None
    );
}

#[tokio::test]
async fn a_wrong_token_fails_without_showing_it() {
    let client = support::client().await;
    let namespace = support::namespace(&client, "helm-token").await;
    let token = format!("not-the-token-{}", support::unique("t"));
    let target = KubeContext::new(kubeconfig_with_token(&token), &namespace);
    let metrics = Arc::new(Metrics::default());
    let helm = engine(&metrics);
    let errors = [
        helm.status(&target, "fw")
            .await
            .expect_err("status with a wrong token"),
        helm.upgrade_install(
            &target,
            "fw",
            &support::packaged_chart("plain", "0.1.0"),
            &json!({}),
            UpgradeOptions::default(),
        )
        .await
        .expect_err("install with a wrong token"),
    ];
    for error in errors {
        let Error::Failed { message, .. } = &error else {
            panic!("{error:?}");
        };
        assert!(
            !message.is_empty() && !message.contains(&token),
            "{message}"
        );
    }
    // The resident engine, still running, was never handed the token but in the kubeconfig file.
    let engines = support::child_processes("helm-engine");
    assert!(!engines.is_empty(), "a resident engine runs");
    for pid in engines {
        for what in ["cmdline", "environ"] {
            let content = std::fs::read(format!("/proc/{pid}/{what}")).unwrap_or_default();
            assert!(
                !String::from_utf8_lossy(&content).contains(&token),
                "the token in the engine's {what}"
            );
        }
    }
}

/// A `helm` that records its arguments, environment and kubeconfig mode, then runs the real one.
fn recording_helm(dir: &Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let script = dir.join("helm");
    let log = dir.display();
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nfor arg in \"$@\"; do printf '%s\\n' \"$arg\"; done >> {log}/argv\n\
             /usr/bin/env >> {log}/env\n\
             /usr/bin/stat -c %a \"$KUBECONFIG\" >> {log}/modes 2>/dev/null\n\
             exec {} \"$@\"\n",
            support::env("HELM_BIN")
        ),
    )
    .expect("write wrapper");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    script
}

#[tokio::test]
async fn credentials_reach_helm_only_in_a_private_kubeconfig_file() {
    let client = support::client().await;
    let namespace = support::namespace(&client, "helm-argv").await;
    let dir = tempfile::tempdir().expect("temp dir");
    let metrics = Arc::new(Metrics::default());
    // Client-side apply, as Kubernetes before 1.22 needs, into a namespace helm creates.
    let helm = Engine::locate(
        Some(recording_helm(dir.path())),
        Duration::from_secs(60),
        metrics.clone(),
    )
    .expect("helm")
    .with_server_side(false);
    let kubeconfig = admin_kubeconfig();
    let created = format!("{namespace}-new");
    let target = KubeContext::new(kubeconfig.clone(), &created);
    let options = UpgradeOptions {
        create_namespace: true,
        wait: true,
        ..Default::default()
    };
    let installed = helm
        .upgrade_install(
            &target,
            "plain",
            &support::packaged_chart("plain", "0.1.0"),
            &json!({"message": "hi"}),
            options,
        )
        .await
        .expect("install");
    assert_eq!(
        (installed.revision, &installed.status),
        (1, &ReleaseStatus::Deployed)
    );
    let map = Api::<ConfigMap>::namespaced(client.clone(), &created)
        .get("plain-plain")
        .await
        .expect("ConfigMap in the created namespace");
    let operations: Vec<_> = map
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|f| f.operation)
        .collect();
    assert_eq!(operations, ["Update"], "applied client-side");
    assert!(helm.uninstall(&target, "plain").await.expect("uninstall"));

    let token = kubeconfig
        .lines()
        .find_map(|line| line.trim().strip_prefix("token:"))
        .map(str::trim)
        .expect("the test bed kubeconfig has a token");
    let argv = std::fs::read_to_string(dir.path().join("argv")).expect("argv log");
    let env = std::fs::read_to_string(dir.path().join("env")).expect("env log");
    assert!(argv.contains("--server-side=false"), "{argv}");
    for (what, text) in [("argv", &argv), ("env", &env)] {
        assert!(!text.contains(token), "the token is in helm's {what}");
        assert!(
            !text.contains("certificate-authority-data"),
            "kubeconfig content in helm's {what}"
        );
    }
    let modes = std::fs::read_to_string(dir.path().join("modes")).expect("modes log");
    assert!(
        !modes.trim().is_empty() && modes.lines().all(|mode| mode == "600"),
        "{modes}"
    );
}

/// Packs a one-template chart `name-0.1.0.tgz` into `dir`, as `helm package` would lay it out.
fn pack_chart(dir: &Path, name: &str, template: &str) -> std::path::PathBuf {
    let path = dir.join(format!("{name}-0.1.0.tgz"));
    let file = std::fs::File::create(&path).expect("chart file");
    let mut archive = tar::Builder::new(flate2::write::GzEncoder::new(
        file,
        flate2::Compression::default(),
    ));
    let chart_yaml = format!("apiVersion: v2\nname: {name}\nversion: 0.1.0\n");
    for (file, content) in [
        ("Chart.yaml", chart_yaml.as_str()),
        ("templates/object.yaml", template),
    ] {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        archive
            .append_data(&mut header, format!("{name}/{file}"), content.as_bytes())
            .expect("chart entry");
    }
    archive
        .into_inner()
        .and_then(|gz| gz.finish())
        .expect("chart archive");
    path
}

#[tokio::test]
async fn old_apiservers_need_client_side_apply_and_a_failed_install_can_be_upgraded() {
    let client = support::client().await;
    let namespace = support::namespace(&client, "helm-ssa").await;
    let dir = tempfile::tempdir().expect("temp dir");
    // A Service port without `protocol`: fine for client-side apply, refused by server-side
    // apply before Kubernetes 1.22.
    let chart = pack_chart(
        dir.path(),
        "no-protocol",
        "apiVersion: v1\nkind: Service\nmetadata: {name: {{ .Release.Name }}}\nspec:\n  ports: [{port: 80}]\n",
    );
    let metrics = Arc::new(Metrics::default());
    let target = KubeContext::new(admin_kubeconfig(), &namespace);
    let server = client.apiserver_version().await.expect("apiserver version");
    let minor: u32 = server
        .minor
        .trim_end_matches('+')
        .parse()
        .expect("minor version");
    let old = server.major == "1" && minor < 22;
    let first = engine(&metrics)
        .upgrade_install(
            &target,
            "svc",
            &chart,
            &json!({}),
            UpgradeOptions::default(),
        )
        .await;
    if old {
        let error = first.expect_err("server-side apply on an old apiserver");
        assert!(error.to_string().contains("protocol"), "{error}");
        let failed = engine(&metrics)
            .status(&target, "svc")
            .await
            .expect("status")
            .expect("a failed release is recorded");
        assert_eq!((failed.revision, failed.status), (1, ReleaseStatus::Failed));
    } else {
        first.expect("server-side apply on a current apiserver");
    }
    let release = engine(&metrics)
        .with_server_side(false)
        .upgrade_install(
            &target,
            "svc",
            &chart,
            &json!({}),
            UpgradeOptions::default(),
        )
        .await
        .expect("client-side apply");
    assert_eq!(
        (release.revision, release.status),
        (2, ReleaseStatus::Deployed)
    );
}

#[tokio::test]
async fn the_gate_sees_what_helm_renders_and_can_stop_it_before_anything_is_written() {
    let client = support::client().await;
    let namespace = support::namespace(&client, "helm-gate").await;
    let metrics = Arc::new(Metrics::default());
    let helm = engine(&metrics);
    let target = KubeContext::new(admin_kubeconfig(), &namespace);
    let chart = support::packaged_chart("plain", "0.1.0");
    let gate = Gate::start(env!("CARGO_BIN_EXE_compositor").into()).expect("gate");
    let maps = Api::<ConfigMap>::namespaced(client.clone(), &namespace);
    let values = json!({"message": "hi"});

    for allow in [false, true] {
        let mut ticket = gate.ticket();
        let options = UpgradeOptions {
            post_renderer: Some(ticket.renderer().clone()),
            ..Default::default()
        };
        let install = helm.upgrade_install(&target, "gated", &chart, &values, options);
        let admission = async {
            let request = ticket.request().await.expect("the manifest");
            let kinds: Vec<_> = parse_manifest(request.manifest.as_deref().unwrap())
                .expect("manifest")
                .into_iter()
                .map(|o| (o.kind, o.name))
                .collect();
            assert_eq!(
                kinds,
                [("ConfigMap".to_string(), "gated-plain".to_string())]
            );
            assert!(
                maps.get_opt("gated-plain").await.unwrap().is_none(),
                "nothing is written while the gate decides"
            );
            request.answer(allow);
        };
        let (installed, ()) = tokio::join!(install, admission);
        if allow {
            assert_eq!(installed.expect("install").revision, 1);
            assert_eq!(
                maps.get("gated-plain").await.unwrap().data.unwrap()["message"],
                "hi"
            );
        } else {
            assert!(installed.is_err(), "a denied manifest stops Helm");
            assert_eq!(helm.status(&target, "gated").await.expect("status"), None);
            assert!(maps.get_opt("gated-plain").await.unwrap().is_none());
        }
    }
}
