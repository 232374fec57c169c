//! CRD assembly: names, versions, columns, inferred and declared schemas, size.
use super::*;
use crate::chart::{ChartMetadata, ChartType};
use serde_json::json;

fn package(schema: Option<serde_json::Value>) -> Package {
    Package {
        metadata: ChartMetadata {
            api_version: "v2".to_owned(),
            name: "fireworks-app".to_owned(),
            version: "1.1.5".to_owned(),
            chart_type: ChartType::Application,
            description: None,
            dependencies: Vec::new(),
        },
        values: json!({"replicas": 3}),
        values_text: String::new(),
        schema,
        templates: Vec::new(),
        subcharts: Vec::new(),
    }
}

#[test]
fn crd_has_names_version_status_and_columns() {
    let p = package(Some(
        json!({"type": "object", "properties": {"replicas": {"type": "integer", "description": "How many."}}}),
    ));
    let (crd, notes) = build(&p, &BuildOptions::default()).unwrap();
    assert!(notes.warnings.is_empty(), "{:?}", notes.warnings);
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("fireworksapps.composition.compositor.dev")
    );
    let v = &crd.spec.versions[0];
    assert_eq!(v.name, "v1-1-5");
    assert!(v.served && v.storage);
    assert!(v.subresources.as_ref().unwrap().status.is_some());
    let cols: Vec<&str> = v
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(cols, ["Ready", "Reason", "Clusters", "Chart", "Age"]);
    let props = root_of(&crd).properties.as_ref().unwrap();
    let replicas = &props["spec"].properties.as_ref().unwrap()["replicas"];
    assert_eq!(
        replicas.description.as_deref(),
        Some("How many.\n\nDefault: 3")
    );
    assert!(
        props["status"]
            .properties
            .as_ref()
            .unwrap()
            .contains_key("clusters")
    );
    assert_eq!(
        crd.spec.names.categories.as_ref().unwrap(),
        &["compositions", "compositor"]
    );
    assert_eq!(crd.spec.conversion.as_ref().unwrap().strategy, "None");
}

/// The root schema of the CRD's first version.
fn root_of(crd: &CustomResourceDefinition) -> &JSONSchemaProps {
    let validation = crd.spec.versions[0].schema.as_ref().unwrap();
    validation.open_api_v3_schema.as_ref().unwrap()
}

/// The `spec` schema of the CRD.
fn spec_of(crd: &CustomResourceDefinition) -> &JSONSchemaProps {
    &root_of(crd).properties.as_ref().unwrap()["spec"]
}

#[test]
fn chart_without_schema_is_inferred_unless_asked_not_to() {
    let (crd, notes) = build(&package(None), &BuildOptions::default()).unwrap();
    let spec = spec_of(&crd);
    assert_eq!(spec.x_kubernetes_preserve_unknown_fields, None);
    let replicas = &spec.properties.as_ref().unwrap()["replicas"];
    assert_eq!(replicas.type_.as_deref(), Some("integer"));
    let lines = notes.inferred.expect("inferred").lines();
    assert!(lines[0].contains("no values.schema.json"), "{lines:?}");
    let never = BuildOptions {
        convert: ConvertOptions {
            infer: crate::api::SchemaInference::Never,
            ..ConvertOptions::default()
        },
        ..BuildOptions::default()
    };
    let (crd, notes) = build(&package(None), &never).unwrap();
    assert_eq!(
        spec_of(&crd).x_kubernetes_preserve_unknown_fields,
        Some(true)
    );
    assert!(notes.inferred.is_none());
}

#[test]
fn inferred_versions_are_compared_like_declared_ones() {
    let old = package(None);
    let (old_version, _) = build_version(&old, &BuildOptions::default()).unwrap();
    let mut wider = old.clone();
    wider.metadata.version = "1.1.6".to_owned();
    wider.values = json!({"replicas": 3, "image": {"tag": "v1"}});
    let (wider_version, _) = build_version(&wider, &BuildOptions::default()).unwrap();
    assert_eq!(crate::crd::breaks(&old_version, &wider_version), []);
    let mut narrower = old.clone();
    narrower.metadata.version = "1.1.7".to_owned();
    narrower.values = json!({"replicas": "3"});
    let (narrower_version, _) = build_version(&narrower, &BuildOptions::default()).unwrap();
    let broken: Vec<String> = crate::crd::breaks(&old_version, &narrower_version)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(broken, ["spec.replicas: type integer → string"]);
}

#[test]
fn a_declared_schema_is_set_aside_only_when_asked() {
    let declared = package(Some(json!({"type": "object"})));
    let (crd, notes) = build(&declared, &BuildOptions::default()).unwrap();
    assert_eq!(
        spec_of(&crd).x_kubernetes_preserve_unknown_fields,
        Some(true)
    );
    assert!(notes.inferred.is_none());
    let always = BuildOptions {
        convert: ConvertOptions {
            infer: crate::api::SchemaInference::Always,
            ..ConvertOptions::default()
        },
        ..BuildOptions::default()
    };
    let (crd, notes) = build(&declared, &always).unwrap();
    assert_eq!(spec_of(&crd).x_kubernetes_preserve_unknown_fields, None);
    assert!(notes.inferred.unwrap().lines()[0].contains("set aside"));
}

#[test]
fn merging_a_version_moves_storage() {
    let p = package(None);
    let (mut crd, _) = build(&p, &BuildOptions::default()).unwrap();
    let mut newer = p.clone();
    newer.metadata.version = "1.1.6".to_owned();
    let (v, _) = build_version(&newer, &BuildOptions::default()).unwrap();
    merge_version(&mut crd, v);
    let stored: Vec<(&str, bool)> = crd
        .spec
        .versions
        .iter()
        .map(|v| (v.name.as_str(), v.storage))
        .collect();
    assert_eq!(stored, [("v1-1-5", false), ("v1-1-6", true)]);
}

#[test]
fn cluster_ref_is_added_unless_the_chart_has_one() {
    let options = BuildOptions {
        cluster_ref: true,
        ..Default::default()
    };
    let (crd, _) = build(&package(Some(json!({"type": "object"}))), &options).unwrap();
    let spec = spec_of(&crd);
    assert!(spec.properties.as_ref().unwrap().contains_key("clusterRef"));
    let taken = package(Some(
        json!({"type": "object", "properties": {"clusterRef": {"type": "string"}}}),
    ));
    assert_eq!(build(&taken, &options).unwrap_err().reason(), "ReservedKey");
}

#[test]
fn values_from_is_added_unless_the_chart_has_one() {
    let options = BuildOptions {
        values_from: true,
        ..Default::default()
    };
    let (crd, _) = build(&package(Some(json!({"type": "object"}))), &options).unwrap();
    let values_from = &spec_of(&crd).properties.as_ref().unwrap()["valuesFrom"];
    assert_eq!(values_from.type_.as_deref(), Some("array"));
    let taken = package(Some(
        json!({"type": "object", "properties": {"valuesFrom": {"type": "string"}}}),
    ));
    let refused = build(&taken, &options).unwrap_err();
    assert_eq!(refused.reason(), "ReservedKey");
    assert!(refused.to_string().contains("\"valuesFrom\""), "{refused}");
}

#[test]
fn depends_on_is_added_unless_the_chart_has_one() {
    let options = BuildOptions {
        depends_on: true,
        ..Default::default()
    };
    let (crd, _) = build(&package(Some(json!({"type": "object"}))), &options).unwrap();
    let spec = spec_of(&crd);
    let depends_on = &spec.properties.as_ref().unwrap()["dependsOn"];
    assert_eq!(depends_on.type_.as_deref(), Some("array"));
    let taken = package(Some(
        json!({"type": "object", "properties": {"dependsOn": {"type": "array"}}}),
    ));
    let refused = build(&taken, &options).unwrap_err();
    assert_eq!(refused.reason(), "ReservedKey");
    assert!(refused.to_string().contains("\"dependsOn\""), "{refused}");
    let (crd, _) = build(&taken, &BuildOptions::default()).unwrap();
    let own = &spec_of(&crd).properties.as_ref().unwrap()["dependsOn"];
    let ours = own.description.as_deref().unwrap_or_default();
    assert!(
        !ours.contains("to wait for"),
        "the chart's own key: {own:?}"
    );
}

#[test]
fn whole_crd_size_is_checked() {
    let (crd, _) = build(&package(None), &BuildOptions::default()).unwrap();
    assert!(check_size(&crd, 1024 * 1024).is_ok());
    assert_eq!(check_size(&crd, 100).unwrap_err().reason(), "CrdTooLarge");
}

#[test]
fn overrides_and_invalid_version_names() {
    let options = BuildOptions {
        version_name: Some("V1".to_owned()),
        ..Default::default()
    };
    assert_eq!(
        build(&package(None), &options).unwrap_err().reason(),
        "InvalidName"
    );
}
