//! Charts of the shapes that used to fail, each beside an administrator's `helm install` of the
//! same package: one written here, and real published ones packaged into `testdata/published`
//! (see its SOURCES.md):
//!
//! - a parent whose subcharts' schemas require their own defaults, with an alias, a condition,
//!   a `global` and `import-values`: its templates get what Helm gives them;
//! - prometheus 29.27.0, whose subcharts' schemas require values only the subcharts' own
//!   values.yaml give (alertmanager requires `replicaCount`, `image`, `serviceAccount`, …): a
//!   composition with no values at all installs, as Helm does;
//! - crossplane, whose default render writes ClusterRoles that aggregate others: each is an
//!   approval line naming its selectors, and once approved the API is served;
//! - external-secrets 2.9.0 and argo-cd 10.1.1 (from `testdata/real-charts`), whose renders
//!   need more memory than a long-serving engine had left, sealed-secrets 2.18.5, which binds a
//!   role to the Group `system:authenticated`, and traefik 41.3.0: each installs
//!   through compositor with its default values as it does by an administrator's `helm
//!   install`, and the two times are printed side by side.

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::{Value, json};

use compositor::api::{CompositionDefinition, find_condition};
use support::charts::{PARENT_OF_TWO, with_values_templates};
use support::definitions::{Fixture, helm_has, publish, wait_gone};

/// A chart of `testdata/published`.
fn published(file: &str) -> PathBuf {
    support::testdata("published").join(file)
}

/// An administrator's `helm install` of `chart` as `release` in a new namespace; the namespace.
async fn admin_install(client: &kube::Client, chart: &std::path::Path, release: &str) -> String {
    timed_admin_install(client, chart, release, &json!({}))
        .await
        .0
}

/// The same with `values`, and the time `helm install` took.
async fn timed_admin_install(
    client: &kube::Client,
    chart: &std::path::Path,
    release: &str,
    values: &Value,
) -> (String, Duration) {
    let namespace = support::namespace(client, release).await;
    let helm = support::Helm::new();
    let chart = chart.to_str().unwrap();
    let values = values.to_string();
    let started = Instant::now();
    helm.ok(
        &["install", release, chart, "-n", &namespace, "-f", "-"],
        Some(&values),
    );
    let took = started.elapsed();
    let status = helm.ok(&["status", release, "-n", &namespace, "-o", "json"], None);
    let status: Value = serde_json::from_str(&status).unwrap();
    assert_eq!(
        status["info"]["status"], "deployed",
        "the baseline: {status}"
    );
    (namespace, took)
}

/// Installs real chart `file` with `values` by an administrator's `helm install`, then (once
/// that release is gone: these charts write objects of fixed names) through compositor as a
/// composition named `name`-something with the same values; both releases write the same kinds
/// of objects. The two times are printed.
async fn installs_as_helm_does(file: &str, plural: &str, name: &str, values: Value) {
    let chart = support::real_chart(file);
    let fixture = Fixture::new(&format!("pub-{}", &plural[..plural.len().min(6)])).await;
    let helm = support::Helm::new();
    let baseline = support::unique(&format!("{plural}-admin"));
    let (baseline_namespace, by_helm) =
        timed_admin_install(&fixture.client, &chart, &baseline, &values).await;
    let kinds = |manifest: &str| -> Vec<String> {
        let mut kinds: Vec<String> = manifest
            .lines()
            .filter_map(|line| line.strip_prefix("kind: "))
            .map(str::to_string)
            .collect();
        kinds.sort();
        kinds
    };
    let manifest = |release: &str, namespace: &str| {
        helm.ok(&["get", "manifest", release, "-n", namespace], None)
    };
    let theirs = kinds(&manifest(&baseline, &baseline_namespace));
    helm.ok(
        &["uninstall", &baseline, "-n", &baseline_namespace, "--wait"],
        None,
    );
    // Objects the chart keeps past an uninstall (`helm.sh/resource-policy: keep`, as argo-cd's
    // CRDs) are still the administrator's release's: Helm would refuse to take them over.
    // A CRD goes once its objects are cleaned up: until then Helm would find it, still the
    // administrator's.
    let crds = Api::<CustomResourceDefinition>::all(fixture.client.clone());
    let baselines = || async {
        let listed = crds.list(&ListParams::default()).await.unwrap().items;
        let theirs = listed
            .into_iter()
            .filter(|crd| crd.annotations().get("meta.helm.sh/release-name") == Some(&baseline));
        theirs.map(|crd| crd.name_any()).collect::<Vec<_>>()
    };
    for name in baselines().await {
        crds.delete(&name, &DeleteParams::default()).await.unwrap();
    }
    // The API server removes a deleted CRD once it has cleaned up its objects, which on a test
    // bed busy with other tests can take a while; if it never does, its conditions say why.
    let mut left = baselines().await;
    for _ in 0..360 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        left = baselines().await;
    }
    if let Some(name) = left.first() {
        let conditions = crds.get(name).await.ok().and_then(|crd| crd.status);
        panic!("the baseline's CRD {name} is still there after 180 s: {conditions:?}");
    }

    let definition = fixture.define(plural, &publish(&chart), json!({})).await;
    let started = Instant::now();
    let installed = fixture.ready_with(definition, name, values).await;
    let through_compositor = started.elapsed();
    let (name, team) = (installed.name.as_str(), installed.namespace.as_str());
    assert_eq!(
        kinds(&manifest(name, team)),
        theirs,
        "{file}: the same objects"
    );
    println!(
        "{file}: helm install {:.1} s, through compositor {:.1} s (its controller started, the composition created and Ready)",
        by_helm.as_secs_f64(),
        through_compositor.as_secs_f64()
    );
    wait_gone(&installed.compositions, name).await;
    assert!(!helm_has(name, team), "the release is uninstalled");
}

#[tokio::test]
async fn external_secrets_installs_as_helm_does() {
    installs_as_helm_does(
        "external-secrets-2.9.0.tgz",
        "secretstores",
        "secretstores",
        json!({}),
    )
    .await;
}

#[tokio::test]
async fn argo_cd_installs_as_helm_does() {
    // Its pre-install hook Job runs Argo CD's image, which the test bed's node does not have:
    // Helm would wait for it, by hand as through compositor. Its names follow its fullname
    // helper's default name, `argocd`, not the chart's, which drops it from a release named
    // with it: the name everyone gives it.
    let values = json!({"redisSecretInit": {"enabled": false}});
    installs_as_helm_does("argo-cd-10.1.1.tgz", "cdservers", "argocd", values).await;
}

#[tokio::test]
async fn sealed_secrets_installs_as_helm_does() {
    // Its RoleBinding to the Group system:authenticated is approved here as an administrator's
    // operator approves every line (see operator_policy.rs for the approval itself).
    installs_as_helm_does(
        "sealed-secrets-2.18.5.tgz",
        "sealedsecrets",
        "sealedsecrets",
        json!({}),
    )
    .await;
}

#[tokio::test]
async fn traefik_installs_as_helm_does() {
    installs_as_helm_does("traefik-41.3.0.tgz", "traefiks", "traefiks", json!({})).await;
}

#[tokio::test]
async fn a_parent_whose_subcharts_require_their_own_defaults_installs_like_helm() {
    let files = with_values_templates(PARENT_OF_TWO);
    let files: Vec<(&str, &str)> = files.iter().map(|(p, c)| (p.as_str(), *c)).collect();
    let url = support::publish_chart("parent", &files);
    let package = PathBuf::from(support::env("TESTBED_DIR")).join("repo/parent-1.0.0.tgz");
    let fixture = Fixture::new("pub-parent").await;
    let baseline = support::unique("parent-admin");
    let baseline_namespace = admin_install(&fixture.client, &package, &baseline).await;

    let definition = fixture.define("parent", &url, json!({})).await;
    let installed = fixture.ready_with_no_values(definition, "parent").await;
    let (name, team) = (&installed.name, &installed.namespace);
    let values = |namespace: &str| {
        let config_maps = Api::<ConfigMap>::namespaced(fixture.client.clone(), namespace);
        async move {
            let mut values = Vec::new();
            for chart in ["parent", "web", "store"] {
                let map = config_maps.get(&format!("values-{chart}")).await.unwrap();
                values.push(map.data.unwrap_or_default());
            }
            values
        }
    };
    let ours = values(team).await;
    assert_eq!(ours, values(&baseline_namespace).await);
    let web = &ours[1]["values.yaml"];
    assert!(
        web.contains("replicaCount: 1") && web.contains("region: eu"),
        "{web}"
    );
    wait_gone(&installed.compositions, name).await;
}

#[tokio::test]
async fn prometheus_installs_with_nothing_but_its_subcharts_defaults() {
    let chart = published("prometheus-29.27.0.tgz");
    let fixture = Fixture::new("pub-prom").await;
    let baseline = support::unique("prom-admin");
    let baseline_namespace = admin_install(&fixture.client, &chart, &baseline).await;

    let definition = fixture
        .define("prometheus", &publish(&chart), json!({}))
        .await;
    let installed = fixture.ready_with_no_values(definition, "metrics").await;
    let (name, team) = (installed.name.as_str(), installed.namespace.as_str());

    // What Helm gave the baseline, the composition's release was given too: the subcharts'
    // own defaults, which their schemas require.
    let helm = support::Helm::new();
    let computed = |release: &str, namespace: &str| -> Value {
        let values = helm.ok(
            &[
                "get", "values", release, "-n", namespace, "--all", "-o", "json",
            ],
            None,
        );
        serde_json::from_str(&values).unwrap()
    };
    let ours = computed(name, team);
    let theirs = computed(&baseline, &baseline_namespace);
    for subchart in [
        "alertmanager",
        "kube-state-metrics",
        "prometheus-node-exporter",
    ] {
        assert_eq!(ours[subchart], theirs[subchart], "{subchart}");
    }
    assert_eq!(ours["alertmanager"]["replicaCount"], 1);
    let manifest = helm.ok(&["get", "manifest", name, "-n", team], None);
    let kinds = manifest.matches("\nkind: ").count();
    let baseline_manifest = helm.ok(
        &["get", "manifest", &baseline, "-n", &baseline_namespace],
        None,
    );
    assert_eq!(kinds, baseline_manifest.matches("\nkind: ").count());
    assert!(
        manifest.contains("kind: StatefulSet") && manifest.contains("name: alertmanager"),
        "the alertmanager subchart is installed"
    );

    wait_gone(&installed.compositions, name).await;
    assert!(!helm_has(name, team), "the release is uninstalled");
    helm.ok(&["uninstall", &baseline, "-n", &baseline_namespace], None);
}

#[tokio::test]
async fn crossplanes_aggregated_roles_are_served_once_approved() {
    let chart = published("crossplane-0.0.1.tgz");
    let fixture = Fixture::new("pub-xp").await;
    // crossplane names its ClusterRoles after the chart, not the release: one install at a
    // time on this test bed.
    let baseline = support::unique("xp-admin");
    let baseline_namespace = admin_install(&fixture.client, &chart, &baseline).await;
    let roles = Api::<ClusterRole>::all(fixture.client.clone());
    let aggregated = roles.get("crossplane").await.expect("the baseline's role");
    assert!(
        aggregated.aggregation_rule.is_some(),
        "an administrator may write what aggregates"
    );
    support::Helm::new().ok(&["uninstall", &baseline, "-n", &baseline_namespace], None);

    support::apply_definition(
        &fixture.client,
        &fixture.namespace,
        "crossplane",
        json!({
            "chart": {
                "url": publish(&chart),
                "credentials": {"username": support::env("COMPOSITOR_TEST_REPO_USERNAME"),
                                "passwordRef": {"name": "repo-password", "key": "password"}},
            },
            "names": {"group": fixture.group},
        }),
    )
    .await;
    // The operator here runs as the test bed's administrator, so every line it asks is
    // approved (tests/operator_policy.rs asks them of a real approval): one line per aggregated
    // role, each with its selectors, and then the API is served.
    let definitions =
        Api::<CompositionDefinition>::namespaced(fixture.client.clone(), &fixture.namespace);
    let mut last = None;
    for _ in 0..240 {
        let status = definitions
            .get("crossplane")
            .await
            .expect("definition")
            .status
            .unwrap_or_default();
        let verdict = find_condition(&status.conditions, "ControllerReady").is_some();
        last = Some(status);
        if verdict {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let status = last.unwrap();
    let condition = find_condition(&status.conditions, "ControllerReady").expect("a verdict");
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("True", "BundleApplied"),
        "{condition:?}"
    );
    assert!(status.crd.is_some(), "the API is served: {status:?}");
}
