//! What the chart's values and schema defaults add: defaults kept when applied, defaults shown in
//! descriptions.

use serde_json::json;

use super::{keywords, package, run, run_with};

#[test]
fn defaults_dropped_unless_applied_then_only_valid_ones() {
    let schema = json!({"type": "object", "properties": {
        "replicas": {"type": "integer", "default": 2},
        "list": {"type": "array", "items": {"type": "string"}, "default": "[]"},
        "nested": {"type": "object", "properties": {"a": {"type": "string", "default": "x"}}}
    }});
    let (v, w) = run(schema.clone());
    assert!(v["properties"]["replicas"].get("default").is_none());
    assert!(w.is_empty());
    let (v, w) = run_with(schema, &package(json!({})), true);
    assert_eq!(v["properties"]["replicas"]["default"], 2);
    assert!(v["properties"]["list"].get("default").is_none());
    assert_eq!(v["properties"]["nested"]["default"], json!({}));
    assert_eq!(v["properties"]["nested"]["properties"]["a"]["default"], "x");
    assert_eq!(keywords(&w), ["default"]);
}

#[test]
fn descriptions_show_the_chart_default() {
    let p = package(json!({"replicas": 3, "image": {"tag": "1.0"}}));
    let (v, _) = run_with(
        json!({"type": "object", "properties": {"replicas": {"type": "integer", "description": "Pods."}, "image": {"type": "object", "properties": {"tag": {"type": "string"}}}}}),
        &p,
        false,
    );
    assert_eq!(
        v["properties"]["replicas"]["description"],
        "Pods.\n\nDefault: 3"
    );
    assert_eq!(
        v["properties"]["image"]["properties"]["tag"]["description"],
        "Default: \"1.0\""
    );
    assert!(v["properties"]["image"].get("description").is_none());
}
