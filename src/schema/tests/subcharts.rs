//! Subcharts: their values keys survive pruning, their schemas and defaults count.

use serde_json::json;

use super::{package, run_with};
use crate::chart::{ChartType, Dependency};

fn dependency(name: &str, alias: Option<&str>) -> Dependency {
    Dependency {
        name: name.to_owned(),
        version: None,
        repository: None,
        alias: alias.map(str::to_owned),
        ..Dependency::default()
    }
}

#[test]
fn subchart_keys_survive_pruning() {
    let mut p = package(json!({}));
    p.metadata.dependencies = vec![
        dependency("cluster", Some("monitoring")),
        dependency("common", None),
        dependency("redis", None),
    ];
    let mut common = package(json!({}));
    common.metadata.name = "common".to_owned();
    common.metadata.chart_type = ChartType::Library;
    let mut redis = package(json!({}));
    redis.metadata.name = "redis".to_owned();
    redis.schema = Some(
        json!({"type": "object", "additionalProperties": false, "properties": {"port": {"$ref": "#/definitions/port"}}, "definitions": {"port": {"type": "integer"}}}),
    );
    p.subcharts = vec![common, redis];
    let (v, _) = run_with(
        json!({"type": "object", "additionalProperties": false, "properties": {"a": {"type": "string"}}}),
        &p,
        false,
    );
    let props = &v["properties"];
    assert_eq!(
        props["monitoring"],
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
    );
    assert!(props.get("common").is_none());
    assert!(props.get("cluster").is_none());
    assert_eq!(props["redis"]["properties"]["port"]["type"], "integer");
    assert_eq!(props["redis"]["x-kubernetes-preserve-unknown-fields"], true);
    assert!(v.get("x-kubernetes-preserve-unknown-fields").is_none());
}

#[test]
fn refs_into_subchart_schemas_resolve() {
    let mut p = package(json!({}));
    let mut sub = package(json!({}));
    sub.metadata.name = "db".to_owned();
    sub.schema = Some(
        json!({"definitions": {"auth": {"type": "object", "properties": {"user": {"type": "string"}}}}}),
    );
    p.subcharts = vec![sub];
    let (v, w) = run_with(
        json!({"type": "object", "properties": {"auth": {"$ref": "charts/db/values.schema.json#/definitions/auth"}}}),
        &p,
        false,
    );
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(
        v["properties"]["auth"]["properties"]["user"]["type"],
        "string"
    );
    assert_eq!(
        v["properties"]["db"]["x-kubernetes-preserve-unknown-fields"],
        true
    );
}

#[test]
fn subchart_defaults_count_as_supplied_values() {
    let mut p = package(json!({"db": {"port": 1}}));
    let mut sub = package(json!({"user": "admin"}));
    sub.metadata.name = "db".to_owned();
    sub.schema = Some(
        json!({"type": "object", "required": ["user", "port", "password"], "properties": {
        "user": {"type": "string"}, "port": {"type": "integer"}, "password": {"type": "string"}}}),
    );
    p.subcharts = vec![sub];
    let (v, _) = run_with(json!({"type": "object"}), &p, false);
    assert_eq!(v["properties"]["db"]["required"], json!(["password"]));
    assert_eq!(
        v["properties"]["db"]["properties"]["user"]["description"],
        "Default: \"admin\""
    );
}
