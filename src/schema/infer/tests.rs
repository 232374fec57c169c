//! Inference rules, one small chart per rule, checked through the converter and the validator
//! as the operator and the controller use them.

use serde_json::{Value, json};

use super::{Inferred, infer};
use crate::chart::{Dependency, Package, TemplateFile};
use crate::schema::{ConvertOptions, convert, structural_problems, validate_package};

/// A chart named `name` whose values.yaml is `yaml` and whose one template is `template`.
fn chart(name: &str, yaml: &str, template: &str) -> Package {
    let values: Value = serde_saphyr::from_str(yaml).expect("values.yaml");
    let mut package = Package::bare(name, values);
    package.values_text = yaml.to_owned();
    package.templates = vec![TemplateFile {
        path: "templates/all.yaml".to_owned(),
        content: template.to_owned(),
    }];
    package
}

/// The structural `spec` of an inferred chart, as JSON.
fn spec(inferred: &Inferred) -> Value {
    let package = &inferred.package;
    let schema = package.schema.as_ref().expect("inferred schema");
    let (props, warnings) = convert(schema, package, &ConvertOptions::default());
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(structural_problems(&props), Vec::<String>::new());
    serde_json::to_value(props).expect("json")
}

/// Paths and messages of what validation refuses in `values`.
fn refused(inferred: &Inferred, values: Value) -> Vec<String> {
    validate_package(&values, &inferred.package)
        .expect("compiles")
        .iter()
        .map(ToString::to_string)
        .collect()
}

const VALUES: &str = r#"
replicas: 1
# -- Image tag.
tag: "1.0"
ratio: 0.5
enabled: true
labels: {}
tolerations: []
ports: [80, 443]
# -- (string) Override of the name.
nameOverride:
extra:
env:
  - name: A
    value: b
maxUnavailable: 1
image:
  repository: nginx
  pullPolicy: IfNotPresent
resources:
  limits:
    cpu: 100m
"#;

const TEMPLATE: &str = "{{ .Values.image.repository }} {{ .Values.image.pullPolicy }} {{ toYaml .Values.resources }} {{ mulf .Values.replicas 1.5 }}";

#[test]
fn defaults_give_types_and_empty_or_null_ones_keep_anything() {
    let inferred = infer(&chart("web", VALUES, "{{ .Values.image.repository }}"), &[]);
    let spec = spec(&inferred);
    let p = &spec["properties"];
    assert_eq!(p["replicas"]["type"], "integer");
    assert_eq!(p["tag"]["type"], "string");
    assert!(
        p["tag"]["description"]
            .as_str()
            .unwrap()
            .starts_with("Image tag.\n\nInferred from values.yaml")
    );
    assert_eq!(p["ratio"]["type"], "number");
    assert_eq!(p["enabled"]["type"], "boolean");
    assert_eq!(p["labels"]["x-kubernetes-preserve-unknown-fields"], true);
    assert_eq!(
        p["tolerations"]["items"]["x-kubernetes-preserve-unknown-fields"],
        true
    );
    assert_eq!(p["ports"]["items"]["type"], "integer");
    assert_eq!(p["nameOverride"]["type"], "string");
    assert_eq!(p["nameOverride"]["nullable"], true);
    assert_eq!(p["extra"]["x-kubernetes-preserve-unknown-fields"], true);
    assert_eq!(
        p["env"]["items"]["x-kubernetes-preserve-unknown-fields"],
        true
    );
    assert_eq!(p["env"]["items"]["properties"]["name"]["type"], "string");
    assert_eq!(p["maxUnavailable"]["x-kubernetes-int-or-string"], true);
    assert_eq!(spec.get("x-kubernetes-preserve-unknown-fields"), None);
    let lines = inferred.report.lines();
    assert!(
        lines[1].starts_with("top level: unknown keys refused"),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l == "descriptions: 2 helm-docs (# --)"),
        "{lines:?}"
    );
}

#[test]
fn maps_read_key_by_key_refuse_unknown_keys_and_others_keep_them() {
    let inferred = infer(&chart("web", VALUES, TEMPLATE), &[]);
    let spec = spec(&inferred);
    let p = &spec["properties"];
    assert_eq!(p["image"].get("x-kubernetes-preserve-unknown-fields"), None);
    assert_eq!(p["resources"]["x-kubernetes-preserve-unknown-fields"], true);
    assert_eq!(p["replicas"]["type"], "number");
    let own = inferred.package.values.clone();
    assert_eq!(refused(&inferred, own), Vec::<String>::new());
    let typo = refused(&inferred, json!({"image": {"tagg": "x"}, "replicaCont": 3}));
    assert_eq!(typo.len(), 2, "{typo:?}");
    assert!(
        typo.iter()
            .all(|m| m.contains("set spec.schema.openKeys to keep it open"))
    );
    let wrong = refused(&inferred, json!({"enabled": "yes"}));
    assert_eq!(
        wrong,
        [
            "enabled: value is not of type \"boolean\" (inferred from values.yaml default true; set spec.schema.openKeys to keep it open)"
        ]
    );
}

#[test]
fn a_chart_reading_values_whole_keeps_unknown_top_level_keys() {
    let inferred = infer(&chart("web", VALUES, "{{ toYaml .Values }}"), &[]);
    assert_eq!(
        spec(&inferred)["x-kubernetes-preserve-unknown-fields"],
        true
    );
    assert_eq!(
        refused(&inferred, json!({"anything": 1})),
        Vec::<String>::new()
    );
    assert!(inferred.report.lines()[1].contains("templates/all.yaml reads .Values whole"));
}

#[test]
fn open_keys_accept_any_value_and_unknown_ones_are_reported() {
    let keys = [
        "replicas".to_owned(),
        "image.repository".to_owned(),
        "nope".to_owned(),
    ];
    let inferred = infer(&chart("web", VALUES, TEMPLATE), &keys);
    let spec = spec(&inferred);
    assert_eq!(spec["properties"]["replicas"].get("type"), None);
    assert_eq!(
        refused(
            &inferred,
            json!({"replicas": "many", "image": {"repository": 7}})
        ),
        Vec::<String>::new()
    );
    let lines = inferred.report.lines();
    assert!(
        lines
            .iter()
            .any(|l| l == "2 any value: spec.schema.openKeys"),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.ends_with("naming no values.yaml key: nope"))
    );
    let all = infer(&chart("web", VALUES, TEMPLATE), &[".".to_owned()]);
    assert_eq!(refused(&all, json!({"x": 1})), Vec::<String>::new());
}

#[test]
fn subcharts_are_typed_under_their_keys_and_keep_unknown_keys() {
    let db_yaml = "## @param port The port\nport: 5432\nauth:\n  user: app\n";
    let db = chart("db", db_yaml, "{{ .Values.auth.user }} {{ .Values.port }}");
    let mut app = chart(
        "app",
        "replicas: 1\ndatabase:\n  enabled: true\n",
        "{{ .Values.replicas }}",
    );
    app.subcharts = vec![db];
    app.metadata.dependencies = vec![Dependency {
        name: "db".to_owned(),
        version: Some("1.0.0".to_owned()),
        alias: Some("database".to_owned()),
        condition: Some("database.enabled".to_owned()),
        tags: vec!["storage".to_owned()],
        ..Dependency::default()
    }];
    let inferred = infer(&app, &[]);
    let spec = spec(&inferred);
    let database = &spec["properties"]["database"];
    assert_eq!(database["x-kubernetes-preserve-unknown-fields"], true);
    assert_eq!(database["properties"]["port"]["type"], "integer");
    assert!(
        database["properties"]["port"]["description"]
            .as_str()
            .unwrap()
            .starts_with("The port")
    );
    assert_eq!(database["properties"]["enabled"]["type"], "boolean");
    assert_eq!(
        database["properties"]["auth"].get("x-kubernetes-preserve-unknown-fields"),
        None
    );
    assert_eq!(refused(&inferred, json!({})), Vec::<String>::new());
    let tags = json!({"tags": {"storage": false}});
    assert_eq!(refused(&inferred, tags), Vec::<String>::new());
    let wrong = refused(
        &inferred,
        json!({"database": {"port": "x", "auth": {"usr": "a"}}}),
    );
    assert_eq!(wrong.len(), 2, "{wrong:?}");
    assert!(wrong[0].starts_with("database"), "{wrong:?}");
}

#[test]
fn numbers_in_strings_stay_strings_and_mixed_lists_are_open() {
    let inferred = infer(
        &chart(
            "web",
            "version: \"3\"\nmixed: [1, true]\nports: [80, http]\n",
            "",
        ),
        &[],
    );
    let spec = spec(&inferred);
    let p = &spec["properties"];
    assert_eq!(p["version"]["type"], "string");
    assert_eq!(
        p["mixed"]["items"]["x-kubernetes-preserve-unknown-fields"],
        true
    );
    assert_eq!(p["ports"]["items"]["x-kubernetes-int-or-string"], true);
    let lines = inferred.report.lines();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("1 string, from a string default that reads as a number")),
        "{lines:?}"
    );
}
