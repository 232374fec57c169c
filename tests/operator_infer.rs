//! The operator serves a chart without values.schema.json with a schema inferred from its
//! values.yaml: the definition's status says how, and the API server refuses a top-level typo
//! and a wrong type.

mod chart_support;
mod support;

use std::time::Duration;

use chart_support::{Server, chart_tgz};
use compositor::api::{CompositionDefinition, find_condition};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

/// Waits until definition `name` is Ready.
async fn ready(api: &Api<CompositionDefinition>, name: &str) -> CompositionDefinition {
    let mut last = None;
    for _ in 0..240 {
        let definition = api.get(name).await.expect("get definition");
        let conditions = definition.status.clone().unwrap_or_default().conditions;
        if find_condition(&conditions, "Ready").is_some_and(|c| c.status == "True") {
            return definition;
        }
        last = Some(conditions);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("{name} never became Ready; conditions: {last:?}");
}

/// Needs only the control plane: the chart is served by the test itself.
#[tokio::test]
async fn a_chart_without_a_schema_is_served_with_an_inferred_schema() {
    let client = support::client().await;
    support::install_crds(&client).await;
    let namespace = support::namespace(&client, "op-infer").await;
    let group = format!("{namespace}.compositor.dev");
    let _operator = support::Process::operator(&namespace);
    let server = Server::http().await;
    let name = support::unique("inferred");
    // Its values.yaml is `chartVersion: "0.1.0"`, its one template a ConfigMap.
    server.file(&format!("/{name}-0.1.0.tgz"), chart_tgz(&name, "0.1.0"));
    let spec = json!({
        "chart": {"url": format!("{}/{name}-0.1.0.tgz", server.url)},
        "names": {"group": group},
        "schema": {"openKeys": ["nope"]},
    });
    support::apply_definition(&client, &namespace, "inferred", spec).await;
    let definitions = Api::<CompositionDefinition>::namespaced(client.clone(), &namespace);
    let status = ready(&definitions, "inferred").await.status.unwrap();
    assert_eq!(
        status.inferred,
        [
            "spec inferred from values.yaml (the chart has no values.schema.json); paths: 1 typed, 0 open",
            "top level: unknown keys refused (set spec.schema.openKeys to keep a path open)",
            "1 string, from a string default",
            "spec.schema.openKeys naming no values.yaml key: nope",
        ]
    );
    let crd = status.crd.unwrap();
    let version = crd.stored_version.clone();
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&group, &version, &crd.kind),
        &crd.plural,
    );
    let compositions: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &namespace, &resource);
    let params = PatchParams::apply("op-infer").validation_strict();
    let apply = |spec: Value| {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{group}/{version}"), "kind": crd.kind,
            "metadata": {"name": "one"}, "spec": spec
        }))
        .unwrap();
        let (compositions, params) = (compositions.clone(), params.clone());
        async move {
            compositions
                .patch("one", &params, &Patch::Apply(&object))
                .await
        }
    };
    let typo = apply(json!({"chartVersoin": "1"}))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        typo.contains(".spec.chartVersoin: field not declared in schema"),
        "{typo}"
    );
    let wrong = apply(json!({"chartVersion": 2}))
        .await
        .unwrap_err()
        .to_string();
    assert!(wrong.contains(".spec.chartVersion"), "{wrong}");
    apply(json!({"chartVersion": "2"})).await.expect("a string");
}
