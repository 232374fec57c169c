//! A chart's values as compositor computes them against what the real `helm` gives each chart's
//! templates, and its validation against Helm's. No cluster is needed: `helm template` renders
//! every chart's `.Values` into a ConfigMap.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use compositor::chart::Package;
use compositor::chart::values::{Enabling, Subchart, coalesced};
use compositor::helm::parse_documents;
use compositor::schema::validate_package;
use serde_json::{Value, json};
use support::charts::{PARENT_OF_TWO, with_values_templates};

/// Writes `files` into `dir`, with the values template in every chart.
fn write_chart(dir: &Path, files: &[(&str, &str)]) {
    for (path, content) in with_values_templates(files) {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, content).unwrap();
    }
}

/// `files` written as the chart `name` into a new temporary directory (kept while it lives),
/// its path and the chart as compositor reads it.
fn written_chart(name: &str, files: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf, Package) {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join(name);
    write_chart(&chart, files);
    let package = Package::load(&chart).expect("load chart");
    (dir, chart, package)
}

/// `helm template` of the chart in `dir` with `given` as a values file.
fn helm_template(dir: &Path, given: &Value) -> Output {
    let file = dir.with_extension("given.json");
    std::fs::write(&file, given.to_string()).unwrap();
    support::Helm::new()
        .offline_command()
        .args(["template", "demo"])
        .arg(dir)
        .arg("--values")
        .arg(&file)
        .output()
        .expect("run helm")
}

/// Each chart's `.Values` as Helm rendered them, by chart name (alias for an aliased one).
fn rendered_values(output: &Output) -> BTreeMap<String, Value> {
    let manifest = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "helm template failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    parse_documents(&manifest)
        .expect("manifest")
        .into_iter()
        .map(|document| {
            let name = document
                .object
                .name
                .trim_start_matches("values-")
                .to_owned();
            let yaml = document.body["data"]["values.yaml"]
                .as_str()
                .unwrap_or("{}");
            let values: Value = serde_saphyr::from_str(yaml).expect("rendered values");
            (name, values)
        })
        .collect()
}

/// Each chart's values as compositor computes them, by the same names.
fn computed_values(package: &Package, given: &Value) -> BTreeMap<String, Value> {
    let computed = coalesced(package, given, Enabling::ByValues);
    let mut out = BTreeMap::from([(package.name().to_owned(), computed.values.clone())]);
    add_subcharts(&mut out, &computed.values, &computed.subcharts);
    out
}

fn add_subcharts(out: &mut BTreeMap<String, Value>, values: &Value, subcharts: &[Subchart]) {
    for subchart in subcharts {
        let own = &values[&subchart.key];
        out.insert(subchart.key.clone(), own.clone());
        add_subcharts(out, own, &subchart.subcharts);
    }
}

/// Asserts that Helm renders with every one of `cases` and gives each chart the values
/// compositor computes, and that compositor, like Helm, finds nothing against the schemas.
fn assert_same_as_helm(chart: &Path, package: &Package, cases: &[Value]) {
    for given in cases {
        let helm = rendered_values(&helm_template(chart, given));
        assert_eq!(
            computed_values(package, given),
            helm,
            "values differ from Helm's with {given}"
        );
        let violations = validate_package(given, package).expect("schemas");
        assert!(violations.is_empty(), "{given}: {violations:?}");
    }
}

#[test]
fn every_charts_values_are_what_helm_gives_its_templates() {
    let (_dir, chart, package) = written_chart("parent", PARENT_OF_TWO);
    let cases = [
        json!({}),
        json!({
            "global": {"region": "ap", "labels": {"env": "prod"}},
            "web": {"dropMe": null, "replicaCount": 3, "nested": {"keep": null}},
            "store": {"port": null},
            "imported": {"connection": {"host": "given"}}
        }),
        json!({"store": {"enabled": false}, "web": {"serviceAccount": {"name": "given"}}}),
    ];
    assert_same_as_helm(&chart, &package, &cases);
}

#[test]
fn what_helm_refuses_by_a_subcharts_schema_compositor_refuses_too() {
    let (_dir, chart, package) = written_chart("parent", PARENT_OF_TWO);
    let given = json!({"web": {"image": null}});
    let output = helm_template(&chart, &given);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("web") && stderr.contains("image"),
        "helm accepted or said something else: {stderr}"
    );
    let violations = validate_package(&given, &package).expect("schemas");
    let listed: Vec<String> = violations.iter().map(ToString::to_string).collect();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(listed[0].starts_with("web: ") && listed[0].contains("image"));
}

/// A chart that aliases one subchart twice, enabled by tags and a condition, with a subchart
/// of its own subcharts enabled by a condition, and a dependency without a version (which
/// names no chart, so its alias is not applied, though its condition still counts).
const NESTED: &[(&str, &str)] = &[
    (
        "Chart.yaml",
        "apiVersion: v2
name: outer
version: 1.0.0
dependencies:
  - name: leaf
    version: 1.0.0
    alias: first
    tags: [front]
  - name: leaf
    version: ~1.0
    alias: second
    tags: [back]
    condition: second.active
  - name: middle
    version: '>= 1'
  - name: extra
    condition: extra.enabled
  - name: unversioned
    alias: renamed
",
    ),
    (
        "values.yaml",
        "tags:\n  front: true\n  back: false\nglobal:\n  deep:\n    x: 1\n",
    ),
    (
        "charts/leaf/Chart.yaml",
        "apiVersion: v2\nname: leaf\nversion: 1.0.0\n",
    ),
    (
        "charts/leaf/values.yaml",
        "active: false\nsize: 1\nglobal:\n  deep:\n    z: 2\n",
    ),
    (
        "charts/middle/Chart.yaml",
        "apiVersion: v2
name: middle
version: 1.0.0
dependencies:
  - name: inner
    version: 1.0.0
    alias: core
    condition: core.enabled
",
    ),
    (
        "charts/middle/values.yaml",
        "core:\n  enabled: true\n  set: middle\n",
    ),
    (
        "charts/middle/charts/inner/Chart.yaml",
        "apiVersion: v2\nname: inner\nversion: 1.0.0\n",
    ),
    (
        "charts/middle/charts/inner/values.yaml",
        "enabled: false\ndepth: 2\n",
    ),
    (
        "charts/extra/Chart.yaml",
        "apiVersion: v2\nname: extra\nversion: 1.0.0\n",
    ),
    ("charts/extra/values.yaml", "x: 1\n"),
    (
        "charts/unversioned/Chart.yaml",
        "apiVersion: v2\nname: unversioned\nversion: 1.0.0\n",
    ),
];

#[test]
fn tags_conditions_nesting_and_double_aliases_are_what_helm_makes_of_them() {
    let (_dir, chart, package) = written_chart("outer", NESTED);
    let cases = [
        json!({}),
        json!({"tags": {"back": true}, "second": {"active": true}}),
        json!({"tags": {"front": false}, "middle": {"core": {"enabled": false}}}),
        json!({"global": {"deep": {"w": 3}}, "first": {"size": null}, "extra": {"enabled": false}}),
    ];
    assert_same_as_helm(&chart, &package, &cases);
}
