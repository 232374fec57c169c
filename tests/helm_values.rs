//! A chart's values as compositor computes them against what the real `helm` gives each chart's
//! templates, and its validation against Helm's. No cluster is needed: `helm template` renders
//! every chart's `.Values` into a ConfigMap.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use compositor::chart::Package;
use compositor::chart::values::{Enabling, coalesced};
use compositor::helm::parse_documents;
use compositor::schema::validate_package;
use serde_json::{Value, json};

/// What each chart renders: its `.Values` as YAML, in a ConfigMap named after it (an aliased
/// subchart's name is its alias).
const VALUES_TEMPLATE: &str = "apiVersion: v1
kind: ConfigMap
metadata:
  name: values-{{ .Chart.Name }}
data:
  values.yaml: |
{{ toYaml .Values | indent 4 }}
";

/// A parent with two subcharts: `web`, whose schema requires values only its own values.yaml
/// gives (and a global the parent gives), and `db` aliased as `store`, enabled by a condition,
/// whose values the parent imports in both forms. Both parent and subchart have `null`s and
/// globals to coalesce.
const FILES: &[(&str, &str)] = &[
    (
        "Chart.yaml",
        "apiVersion: v2
name: parent
version: 1.0.0
dependencies:
  - name: web
    version: 1.0.0
  - name: db
    version: 1.0.0
    alias: store
    condition: store.enabled
    import-values:
      - child: connection
        parent: imported.connection
      - settings
",
    ),
    (
        "values.yaml",
        "global:
  region: eu
  labels:
    team: parent
web:
  dropMe: null
  nested:
    drop: null
store:
  enabled: true
  port: 6000
imported:
  connection:
    user: parent
",
    ),
    (
        "charts/web/Chart.yaml",
        "apiVersion: v2\nname: web\nversion: 1.0.0\n",
    ),
    (
        "charts/web/values.yaml",
        "replicaCount: 1
image:
  repository: web
  tag: \"1.0\"
serviceAccount:
  create: true
dropMe: here
nested:
  keep: 1
  drop: 2
global:
  region: us
  labels:
    team: web
    tier: front
  webOnly: w
",
    ),
    (
        "charts/web/values.schema.json",
        r#"{
  "type": "object",
  "required": ["replicaCount", "image", "serviceAccount", "global"],
  "properties": {
    "replicaCount": {"type": "integer"},
    "image": {"type": "object", "required": ["repository"]},
    "global": {"type": "object", "required": ["region"]}
  }
}"#,
    ),
    (
        "charts/db/Chart.yaml",
        "apiVersion: v2\nname: db\nversion: 1.0.0\n",
    ),
    (
        "charts/db/values.yaml",
        "enabled: false
port: 5432
connection:
  host: db
  user: db
exports:
  settings:
    maxConnections: 10
",
    ),
];

/// Writes the chart into `dir`, with the values template in every chart.
fn write_chart(dir: &Path) {
    for (path, content) in FILES {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    for chart in ["", "charts/web/", "charts/db/"] {
        let templates = dir.join(chart).join("templates");
        std::fs::create_dir_all(&templates).unwrap();
        std::fs::write(templates.join("values.yaml"), VALUES_TEMPLATE).unwrap();
    }
}

/// The chart written into a new temporary directory (kept while it lives), its path and the
/// chart as compositor reads it.
fn written_chart() -> (tempfile::TempDir, PathBuf, Package) {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("parent");
    write_chart(&chart);
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
    let mut out = BTreeMap::from([("parent".to_owned(), computed.values.clone())]);
    for subchart in &computed.subcharts {
        out.insert(subchart.key.clone(), computed.values[&subchart.key].clone());
    }
    out
}

#[test]
fn every_charts_values_are_what_helm_gives_its_templates() {
    let (_dir, chart, package) = written_chart();
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
    for given in cases {
        let helm = rendered_values(&helm_template(&chart, &given));
        assert_eq!(
            computed_values(&package, &given),
            helm,
            "values differ from Helm's with {given}"
        );
        // Helm checked every schema and accepted the values; so does compositor.
        let violations = validate_package(&given, &package).expect("schemas");
        assert!(violations.is_empty(), "{given}: {violations:?}");
    }
}

#[test]
fn what_helm_refuses_by_a_subcharts_schema_compositor_refuses_too() {
    let (_dir, chart, package) = written_chart();
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
