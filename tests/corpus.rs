//! The corpus of real chart schemas (`../shared/testdata/corpus`): every schema converts into a
//! CRD that a real apiserver establishes, and every chart's own values.yaml, as the `spec` of a
//! custom resource, is accepted and read back without losing a value.

mod support;

use std::path::PathBuf;
use std::time::Duration;

use compositor::chart::{ChartMetadata, Package};
use compositor::crd::{self, BuildOptions, NameOverrides};
use compositor::schema::{self, ConvertOptions};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::{Value, json};

/// The corpus folder; `None` (skip) only outside CI.
fn corpus_dir() -> Option<PathBuf> {
    support::shared_testdata("COMPOSITOR_CORPUS", "corpus")
}

/// Every chart of the corpus, read into a `Package` (Chart.yaml, values.yaml, schema).
fn corpus() -> Vec<(String, Package)> {
    let Some(dir) = corpus_dir() else {
        return Vec::new();
    };
    let mut charts = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("read corpus") {
        let path = entry.expect("corpus entry").path();
        if !path.join("Chart.yaml").exists() {
            continue;
        }
        let read = |f: &str| std::fs::read_to_string(path.join(f)).expect(f);
        let metadata: ChartMetadata =
            serde_saphyr::from_str(&read("Chart.yaml")).expect("Chart.yaml");
        let values: Value = serde_saphyr::from_str(&read("values.yaml")).expect("values.yaml");
        let schema: Value =
            serde_json::from_str(&read("values.schema.json")).expect("values.schema.json");
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        charts.push((
            name,
            Package {
                metadata,
                values,
                values_text: String::new(),
                schema: Some(schema),
                templates: Vec::new(),
                subcharts: Vec::new(),
            },
        ));
    }
    charts.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(
        charts.len() >= 14,
        "the corpus has at least 14 charts, found {}",
        charts.len()
    );
    charts
}

/// What the apiserver keeps of `value` under `schema`: unknown fields pruned, nulls of
/// non-nullable fields dropped (the rules of apiextensions-apiserver's pruning).
fn prune(value: &Value, s: &JSONSchemaProps) -> Value {
    let preserve = s.x_kubernetes_preserve_unknown_fields == Some(true);
    match value {
        Value::Object(map) => {
            let mut out = serde_json::Map::new();
            for (k, v) in map {
                let child = s.properties.as_ref().and_then(|p| p.get(k)).or(
                    match &s.additional_properties {
                        Some(JSONSchemaPropsOrBool::Schema(a)) => Some(a.as_ref()),
                        _ => None,
                    },
                );
                match child {
                    Some(c) if v.is_null() && c.nullable != Some(true) => {}
                    Some(c) => {
                        out.insert(k.clone(), prune(v, c));
                    }
                    None if preserve => {
                        out.insert(k.clone(), v.clone());
                    }
                    None => {}
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => match &s.items {
            Some(JSONSchemaPropsOrArray::Schema(i)) => {
                Value::Array(items.iter().map(|v| prune(v, i)).collect())
            }
            _ => value.clone(),
        },
        other => other.clone(),
    }
}

/// Every value of `expected` is in `actual` (numbers compared by value).
fn missing(expected: &Value, actual: &Value, path: &str, out: &mut Vec<String>) {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, v) in e {
                match a.get(k) {
                    Some(av) => missing(v, av, &format!("{path}.{k}"), out),
                    None => out.push(format!("{path}.{k} is gone")),
                }
            }
        }
        (Value::Array(e), Value::Array(a)) if e.len() == a.len() => {
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                missing(ev, av, &format!("{path}[{i}]"), out);
            }
        }
        (Value::Number(e), Value::Number(a)) if e.as_f64() == a.as_f64() => {}
        (e, a) if e == a => {}
        (e, a) => out.push(format!("{path}: {e} became {a}")),
    }
}

/// Offline: every schema converts to a structural schema that keeps every value of values.yaml.
#[test]
fn corpus_converts_to_structural_schemas_that_keep_values() {
    let mut failures = Vec::new();
    for (name, package) in corpus() {
        let (spec, _) = schema::convert(
            package.schema.as_ref().unwrap(),
            &package,
            &ConvertOptions::default(),
        );
        for p in schema::structural_problems(&spec) {
            failures.push(format!("{name}: {p}"));
        }
        let mut lost = Vec::new();
        missing(
            &package.values,
            &prune(&package.values, &spec),
            "spec",
            &mut lost,
        );
        failures.extend(lost.into_iter().map(|l| format!("{name}: {l}")));
        let (with_defaults, _) = schema::convert(
            package.schema.as_ref().unwrap(),
            &package,
            &ConvertOptions {
                apply_defaults: true,
                ..ConvertOptions::default()
            },
        );
        for p in schema::structural_problems(&with_defaults) {
            failures.push(format!("{name} (applyDefaults): {p}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Offline: each chart's values.yaml is checked against its original schema without error.
#[test]
fn corpus_schemas_compile_for_validation() {
    for (name, package) in corpus() {
        let result = schema::validate(&package.values, package.schema.as_ref().unwrap());
        assert!(result.is_ok(), "{name}: {result:?}");
    }
}

/// Against the test bed's apiserver: 14/14 CRDs Established, 14/14 values.yaml objects created
/// and read back whole. Each chart is tried with and without applied defaults.
#[tokio::test]
async fn corpus_crds_are_established_and_accept_values() {
    let charts = corpus();
    if charts.is_empty() {
        return;
    }
    let client = support::client().await;
    let namespace = support::namespace(&client, "corpus").await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    // A group of this run only, so nothing collides with other tests on the same apiserver.
    let group = format!("{}.corpus.compositor.dev", support::unique("g"));
    let mut failures = Vec::new();
    let mut established = 0;
    let mut accepted = 0;
    for apply_defaults in [false, true] {
        for (name, package) in &charts {
            let kind = format!(
                "{}{}",
                crd::kind_from_chart(&package.metadata.name),
                if apply_defaults { "D" } else { "" }
            );
            let options = BuildOptions {
                names: NameOverrides {
                    group: Some(group.clone()),
                    kind: Some(kind.clone()),
                    ..Default::default()
                },
                // Chart versions in the corpus include placeholders; the name is not under test.
                version_name: Some("v1".to_owned()),
                convert: ConvertOptions {
                    apply_defaults,
                    ..ConvertOptions::default()
                },
                ..Default::default()
            };
            let (crd, _) = crd::build(package, &options).expect("build");
            let crd_name = crd.metadata.name.clone().unwrap();
            if let Err(e) = crds.create(&PostParams::default(), &crd).await {
                failures.push(format!(
                    "{name} (defaults {apply_defaults}): CRD rejected: {e}"
                ));
                continue;
            }
            let ready = tokio::time::timeout(
                Duration::from_secs(30),
                await_condition(crds.clone(), &crd_name, conditions::is_crd_established()),
            )
            .await;
            if !matches!(ready, Ok(Ok(_))) {
                failures.push(format!(
                    "{name} (defaults {apply_defaults}): CRD not Established"
                ));
                continue;
            }
            established += 1;
            let resource = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(&group, "v1", &kind),
                &crd.spec.names.plural,
            );
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &namespace, &resource);
            let object: DynamicObject = serde_json::from_value(json!({
                "apiVersion": format!("{group}/v1"),
                "kind": kind,
                "metadata": {"name": "values"},
                "spec": package.values,
            }))
            .unwrap();
            // Discovery of a just-established CRD can lag by a moment.
            let mut created = api.create(&PostParams::default(), &object).await;
            for _ in 0..20 {
                if matches!(&created, Err(kube::Error::Api(s)) if s.code == 404) {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    created = api.create(&PostParams::default(), &object).await;
                }
            }
            if let Err(e) = created {
                failures.push(format!(
                    "{name} (defaults {apply_defaults}): values.yaml rejected: {e}"
                ));
                continue;
            }
            let stored = api.get("values").await.expect("read back");
            let mut lost = Vec::new();
            missing(&package.values, &stored.data["spec"], "spec", &mut lost);
            if lost.is_empty() {
                accepted += 1;
            }
            failures.extend(
                lost.into_iter()
                    .map(|l| format!("{name} (defaults {apply_defaults}): {l}")),
            );
        }
    }
    let tries = 2 * charts.len();
    eprintln!(
        "corpus: {established}/{tries} CRDs Established, {accepted}/{tries} values.yaml objects accepted and intact"
    );
    for (_, package) in &charts {
        for suffix in ["", "D"] {
            let kind = format!("{}{suffix}", crd::kind_from_chart(&package.metadata.name));
            let plural = crd::plural_of(&kind.to_lowercase());
            let _ = crds
                .delete(&format!("{plural}.{group}"), &DeleteParams::default())
                .await;
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!((established, accepted), (tries, tries));
}
