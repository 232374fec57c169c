//! Where the operator gets charts: the test bed's HTTP repository with a password, its OCI
//! registry and plain archive URLs; and how it reports a chart it cannot get (a wrong
//! password, an unreachable repository, an unknown chart or version) without making anything.

mod support;

use serde_json::json;

use compositor::api::find_condition;
use support::definitions::{Fixture, can_named};

#[tokio::test]
async fn a_wrong_password_is_reported_and_makes_nothing() {
    let fixture = Fixture::new("op-auth").await;
    let secret =
        json!({"metadata": {"name": "wrong"}, "stringData": {"password": "not-the-password"}});
    fixture.create_secret(secret).await;
    fixture
        .apply_definition("broken", json!({"repo": "fireworks-app", "version": "1.1.5",
            "credentials": {"username": "charts", "passwordRef": {"name": "wrong", "key": "password"}}}))
        .await;
    let definition = fixture
        .wait_condition("broken", "ChartResolved", "False")
        .await;
    let conditions = definition.status.unwrap().conditions;
    let condition = find_condition(&conditions, "ChartResolved").unwrap();
    assert_eq!(condition.reason, "AuthenticationFailed");
    assert!(
        !condition.message.contains("not-the-password"),
        "{}",
        condition.message
    );
    let ready = find_condition(&conditions, "Ready").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "AuthenticationFailed")
    );
    fixture.assert_no_bundle().await;
}

#[tokio::test]
async fn charts_come_from_the_oci_registry_and_from_archive_urls() {
    let fixture = Fixture::new("op-sources").await;
    fixture
        .create_secret(json!({
            "metadata": {"name": "registry"}, "type": "kubernetes.io/basic-auth",
            "stringData": {"username": support::env("COMPOSITOR_TEST_REGISTRY_USERNAME"),
                           "password": support::env("COMPOSITOR_TEST_REGISTRY_PASSWORD")}
        }))
        .await;
    fixture
        .apply_definition(
            "from-oci",
            json!({
                "url": format!("oci://{}/charts", support::env("COMPOSITOR_TEST_REGISTRY")),
                "repo": "tenant-addon", "version": "0.1.0",
                "credentials": {"secretRef": {"name": "registry"}},
            }),
        )
        .await;
    let from_oci = fixture.wait_condition("from-oci", "Ready", "True").await;
    let status = from_oci.status.unwrap();
    assert!(status.chart.unwrap().digest.starts_with("sha256:"));
    let controller = "tenantaddons-v0-1-0-controller";
    let home = Some(fixture.namespace.as_str());
    let reads = can_named(
        &fixture,
        controller,
        "get",
        "",
        "secrets",
        home,
        Some("registry"),
    );
    assert!(reads.await, "the controller may read the registry's Secret");
    // The chart's ClusterRole is named after each release: the status shows it as a pattern,
    // granted by name once a composition fills it in.
    let footprint = status.versions[0].footprint.clone().expect("footprint");
    assert!(
        footprint.cluster_objects.contains(
            &"clusterroles.rbac.authorization.k8s.io tenant-addon:{namespace}:{release}"
                .to_string()
        ),
        "{footprint:?}"
    );
    assert_eq!(
        footprint.cluster_rules,
        ["get,list,watch configmaps"],
        "what the chart's ClusterRole grants"
    );

    fixture
        .apply_definition(
            "from-archive",
            json!({"url": format!("{}/plain-0.1.0.tgz", support::env("COMPOSITOR_TEST_REPO_URL"))}),
        )
        .await;
    let from_archive = fixture
        .wait_condition("from-archive", "Ready", "True")
        .await;
    assert_eq!(from_archive.status.unwrap().crd.unwrap().kind, "Plain");
}

#[tokio::test]
async fn unreachable_repositories_and_unknown_versions_are_reported_precisely() {
    let fixture = Fixture::new("op-bad").await;
    let cases = [
        (
            "unreachable",
            json!({"url": "http://127.0.0.1:9", "repo": "fireworks-app", "version": "1.1.5"}),
            "RepositoryUnreachable",
        ),
        (
            "no-such-version",
            json!({"repo": "fireworks-app", "version": "9.9.9"}),
            "VersionNotFound",
        ),
        (
            "no-such-chart",
            json!({"repo": "no-such-chart", "version": "1.0.0"}),
            "ChartNotFound",
        ),
        (
            "not-a-version",
            json!({"repo": "fireworks-app", "version": "latest!"}),
            "InvalidVersion",
        ),
    ];
    for (name, chart, _) in &cases {
        fixture.apply_definition(name, chart.clone()).await;
    }
    // Each message names the chart or the repository it was looked for in.
    let repository = support::env("COMPOSITOR_TEST_REPO_URL");
    for (name, _, reason) in &cases {
        let condition = fixture
            .reached_condition(name, "ChartResolved", "False")
            .await;
        assert_eq!(&condition.reason, reason, "{name}: {}", condition.message);
        assert!(
            condition.message.contains("fireworks-app")
                || condition.message.contains("127.0.0.1")
                || condition.message.contains(&repository),
            "{name}: {}",
            condition.message
        );
    }
    // No bundle for a broken definition.
    fixture.assert_no_bundle().await;
}
