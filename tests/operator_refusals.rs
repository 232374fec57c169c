//! Charts the operator refuses to serve, each with a reason on the definition and nothing
//! written: a chart that brings compositor's own CRDs, one whose roles aggregate Kubernetes' own, one
//! with no templates or a value that clashes with compositor's own keys, and a version
//! republished with a schema its stored objects would break on.

mod support;

use serde_json::json;

use support::definitions::Fixture;
use support::operator::{CONFIGMAP, merge_patch, publish_with};

/// A chart whose `crds/` names compositor's own CRD is refused before anything is written: its
/// releases would otherwise update or delete it.
#[tokio::test]
async fn a_chart_may_not_bring_compositors_own_crds() {
    let fixture = Fixture::new("op-crd-steal").await;
    let own = compositor::api::crds_yaml().unwrap();
    let schema = r#"{"type": "object", "properties": {"name": {"type": "string"}}}"#;
    let url = publish_with(
        &support::unique("crd-thief"),
        &[
            ("values.schema.json", schema),
            ("values.yaml", "name: x\n"),
            ("crds/compositor.yaml", &own),
            ("templates/configmap.yaml", CONFIGMAP),
        ],
    );
    fixture.apply_definition("thief", json!({"url": url})).await;
    let condition = fixture
        .reached_condition("thief", "CRDReady", "False")
        .await;
    assert_eq!(condition.reason, "ChartCRDNotAllowed", "{condition:?}");
    assert!(
        condition
            .message
            .contains("compositiondefinitions.compositor.dev"),
        "{condition:?}"
    );
    fixture.assert_no_bundle().await;
}

/// A chart whose default render has a ClusterRole that aggregates Kubernetes' own roles (here
/// everything aggregated into admin) can never install, approved or not: the definition says
/// so, one line per role with why, before anything is served.
#[tokio::test]
async fn a_chart_with_aggregated_roles_is_refused_before_anything_is_served() {
    let fixture = Fixture::new("op-aggregated").await;
    let url = publish_with(
        &support::unique("aggregator"),
        &[(
            "templates/role.yaml",
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: '{{ .Release.Name }}-admin'}\naggregationRule:\n  clusterRoleSelectors:\n  - matchLabels: {rbac.authorization.k8s.io/aggregate-to-admin: 'true'}\n",
        )],
    );
    fixture
        .apply_definition("aggregator", json!({"url": url}))
        .await;
    let refused = fixture
        .wait_condition("aggregator", "ControllerReady", "False")
        .await;
    let condition = support::operator::condition(&refused, "ControllerReady");
    assert_eq!(
        condition.reason, "AggregatedRoleNotAllowed",
        "{condition:?}"
    );
    assert!(
        condition.message.ends_with(
            "\n{release}-admin: a selector names rbac.authorization.k8s.io/aggregate-to-admin, \
             a label of Kubernetes' or compositor's own roles"
        ),
        "{condition:?}"
    );
    assert!(refused.status.unwrap().crd.is_none(), "no API is served");
    fixture.assert_no_bundle().await;
}

#[tokio::test]
async fn charts_that_cannot_become_an_api_are_refused_with_a_reason() {
    let fixture = Fixture::new("op-refuse").await;
    let suffix = support::unique("c");
    let empty = publish_with(
        &format!("empty-{suffix}"),
        &[
            ("values.yaml", "a: 1\n"),
            ("templates/_helpers.tpl", "{{- define \"x\" }}x{{ end }}\n"),
        ],
    );
    let clash = publish_with(
        &format!("clash-{suffix}"),
        &[
            (
                "values.schema.json",
                r#"{"type": "object", "properties": {"clusterRef": {"type": "string"}}}"#,
            ),
            ("templates/cm.yaml", CONFIGMAP),
        ],
    );
    fixture
        .apply_definition("empty", json!({"url": empty}))
        .await;
    let clash_spec = json!({
        "chart": {"url": clash, "credentials": {"username": "charts", "passwordRef": {"name": "repo-password", "key": "password"}}},
        "names": {"group": fixture.group}, "placement": {"clusters": "AllClusters"},
    });
    support::apply_definition(&fixture.client, &fixture.namespace, "clash", clash_spec).await;

    let condition = fixture
        .reached_condition("empty", "ChartResolved", "False")
        .await;
    assert_eq!(condition.reason, "InvalidChart", "{}", condition.message);
    assert!(
        condition.message.contains("no templates"),
        "{}",
        condition.message
    );
    let condition = fixture
        .reached_condition("clash", "CRDReady", "False")
        .await;
    assert_eq!(condition.reason, "ReservedKey", "{}", condition.message);
    assert!(
        condition.message.contains("clusterRef"),
        "{}",
        condition.message
    );
    fixture.assert_no_bundle().await;
}

#[tokio::test]
async fn a_republished_chart_version_must_keep_its_schema_compatible() {
    let mut fixture = Fixture::new("op-republish").await;
    let name = format!("repub-{}", support::unique("c"));
    let chart = |schema: &str| {
        publish_with(
            &name,
            &[
                ("values.schema.json", schema),
                ("templates/cm.yaml", CONFIGMAP),
            ],
        )
    };
    let url = chart(
        r#"{"type": "object", "properties": {"size": {"type": "integer"}, "color": {"type": "string"}}}"#,
    );
    fixture.apply_definition("repub", json!({"url": url})).await;
    fixture.wait_condition("repub", "Ready", "True").await;

    // The same version is published again with `size` as a string; a fresh operator (its cache
    // does not have the old archive) notices and refuses what stored objects would break on.
    chart(
        r#"{"type": "object", "properties": {"size": {"type": "string"}, "color": {"type": "string"}}}"#,
    );
    fixture.operator = support::Process::operator(&fixture.namespace);
    let touch = json!({"metadata": {"annotations": {"test/touch": "1"}}});
    merge_patch(&fixture.definitions(), "repub", touch).await;
    let condition = fixture
        .reached_condition("repub", "CRDReady", "False")
        .await;
    assert_eq!(condition.reason, "SchemaConflict", "{}", condition.message);
    assert!(
        condition
            .message
            .contains("spec.size: type integer → string"),
        "the path that broke and why: {}",
        condition.message
    );
    let crd_name = format!("{}s.{}", name.replace('-', ""), fixture.group);
    let crd = fixture.crds().get(&crd_name).await.expect("CRD");
    let spec = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
    assert!(
        spec.to_string().contains("color"),
        "the served schema is unchanged"
    );
}
