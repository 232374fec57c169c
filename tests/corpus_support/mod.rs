//! The corpus of real chart schemas (`testdata/corpus`, see `charts`), read for the tests that
//! use it, and what the apiserver keeps of a value under a structural schema.

// Each test file uses its own part of this module.
#![allow(dead_code)]

use std::time::Duration;

use compositor::chart::Package;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::{Value, json};

use crate::support;

mod charts;

/// Every chart of the corpus, read into a `Package` (Chart.yaml, values.yaml, schema).
pub fn corpus() -> Vec<(String, Package)> {
    let corpus = support::testdata("corpus");
    let charts = charts::read(&corpus, &support::testdata("published")).expect("read the corpus");
    assert!(
        charts.len() >= 14,
        "the corpus has at least 14 charts, found {}",
        charts.len()
    );
    charts.into_iter().map(|c| (c.name, c.package)).collect()
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
pub fn missing(expected: &Value, actual: &Value, path: &str, out: &mut Vec<String>) {
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

/// Why `spec` is not a structural schema that keeps every value of `values`, one line each,
/// starting with the chart's `name`.
pub fn unkept(name: &str, values: &Value, spec: &JSONSchemaProps) -> Vec<String> {
    let mut out: Vec<String> = compositor::schema::structural_problems(spec)
        .into_iter()
        .map(|p| format!("{name}: {p}"))
        .collect();
    let mut lost = Vec::new();
    missing(values, &prune(values, spec), "spec", &mut lost);
    out.extend(lost.into_iter().map(|l| format!("{name}: pruned {l}")));
    out
}

/// Creates `crd`, waits until it is Established, and returns the API of its first version's
/// objects in `namespace`.
pub async fn establish(
    client: &Client,
    crd: &CustomResourceDefinition,
    namespace: &str,
) -> Result<Api<DynamicObject>, String> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.metadata.name.clone().unwrap_or_default();
    crds.create(&PostParams::default(), crd)
        .await
        .map_err(|e| format!("CRD rejected: {e}"))?;
    let ready = tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(crds, &name, conditions::is_crd_established()),
    )
    .await;
    if !matches!(ready, Ok(Ok(_))) {
        return Err("CRD not Established".to_owned());
    }
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(
            &crd.spec.group,
            &crd.spec.versions[0].name,
            &crd.spec.names.kind,
        ),
        &crd.spec.names.plural,
    );
    Ok(Api::namespaced_with(client.clone(), namespace, &resource))
}

/// An object of `crd`'s first version named `name`, with `spec`.
pub fn object_of(crd: &CustomResourceDefinition, name: &str, spec: &Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": format!("{}/{}", crd.spec.group, crd.spec.versions[0].name),
        "kind": crd.spec.names.kind,
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("an object")
}

/// `call`, again while it fails with 404: discovery of a just-established CRD can lag by a
/// moment.
pub async fn while_discovery_lags<T, F, Fut>(mut call: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let mut result = call().await;
    for _ in 0..20 {
        if !matches!(&result, Err(kube::Error::Api(s)) if s.code == 404) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        result = call().await;
    }
    result
}

/// The path of the first scalar field of `schema` (depth first), and a value of another type.
pub fn wrong_scalar(schema: &JSONSchemaProps) -> Option<(Vec<String>, Value)> {
    let wrong = match schema.type_.as_deref()? {
        "boolean" => Some(json!("yes")),
        "integer" | "number" => Some(json!("many")),
        "string" => Some(json!({"not": "a string"})),
        _ => None,
    };
    if let Some(wrong) = wrong {
        return Some((Vec::new(), wrong));
    }
    schema.properties.as_ref()?.iter().find_map(|(key, field)| {
        let (mut path, wrong) = wrong_scalar(field)?;
        path.insert(0, key.clone());
        Some((path, wrong))
    })
}

/// `value` nested under `path`.
pub fn nested(path: &[String], value: Value) -> Value {
    path.iter()
        .rev()
        .fold(value, |inner, key| json!({key: inner}))
}

/// The `spec` schema of `crd`'s first version.
pub fn spec_of(crd: &CustomResourceDefinition) -> &JSONSchemaProps {
    let root = crd.spec.versions[0].schema.as_ref().expect("a schema");
    let properties = root
        .open_api_v3_schema
        .as_ref()
        .and_then(|s| s.properties.as_ref());
    &properties.expect("properties")["spec"]
}

/// Applies, as `params` say, an object of `crd` whose first scalar field has a value of
/// another type; `None` when the API server refuses it naming the field, else why not.
pub async fn wrong_type_refused(
    api: &Api<DynamicObject>,
    crd: &CustomResourceDefinition,
    params: &PatchParams,
) -> Option<String> {
    let Some((path, value)) = wrong_scalar(spec_of(crd)) else {
        return Some("no scalar field".to_owned());
    };
    let field = path.join(".");
    let object = object_of(crd, "wrong", &nested(&path, value));
    match api.patch("wrong", params, &Patch::Apply(&object)).await {
        Err(e) if e.to_string().contains(&format!("spec.{field}")) => {
            eprintln!("{}: wrong type refused: {e}", crd.spec.names.kind);
            None
        }
        other => Some(format!("wrong type at {field}: {other:?}")),
    }
}

/// Deletes the CRDs named, whatever happens.
pub async fn delete_crds(client: &Client, names: &[String]) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in names {
        let _ = crds.delete(name, &Default::default()).await;
    }
}
