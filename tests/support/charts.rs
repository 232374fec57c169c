//! Charts tests write, shared by the tests that render them with Helm and those that install
//! them.

/// What each chart renders: its `.Values` as YAML, in a ConfigMap named after it (an aliased
/// subchart's name is its alias).
pub const VALUES_TEMPLATE: &str = "apiVersion: v1
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
pub const PARENT_OF_TWO: &[(&str, &str)] = &[
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

/// `files` with the values template beside every chart's `Chart.yaml`.
pub fn with_values_templates<'a>(files: &[(&'a str, &'a str)]) -> Vec<(String, &'a str)> {
    let mut out = Vec::new();
    for (path, content) in files {
        out.push((path.to_string(), *content));
        if let Some(dir) = path.strip_suffix("Chart.yaml") {
            out.push((format!("{dir}templates/values.yaml"), VALUES_TEMPLATE));
        }
    }
    out
}

/// A chart with a CRD of its own, `widgets` of a group unique to it with a status subresource,
/// and one Widget named after the release; published, its URL and the Widgets' resource.
pub fn widget_chart() -> (String, kube::core::ApiResource) {
    let mut url = String::new();
    let name = super::unique("widgets");
    let widgets = widget_versions(&name, &["0.1.0"], |name, files| {
        url = super::publish_chart(name, files);
    });
    (url, widgets)
}

/// The same chart, named `name`, at each of `versions`, the Widget's `spec.size` the version's
/// position (1, 2, …), each handed to `publish` (the name and the chart's files); the Widgets'
/// resource.
pub fn widget_versions(
    name: &str,
    versions: &[&str],
    mut publish: impl FnMut(&str, &[(&str, &str)]),
) -> kube::core::ApiResource {
    let group = format!("{name}.health.compositor.dev");
    let crd = format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: widgets.{group}}}
spec:
  group: {group}
  names: {{kind: Widget, plural: widgets, singular: widget}}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      subresources: {{status: {{}}}}
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
"#
    );
    for (version, size) in versions.iter().zip(1..) {
        let widget = format!(
            "apiVersion: {group}/v1\nkind: Widget\nmetadata: {{name: '{{{{ .Release.Name }}}}'}}\nspec: {{size: {size}}}\n"
        );
        let chart = format!("apiVersion: v2\nname: {name}\nversion: {version}\n");
        publish(
            name,
            &[
                ("Chart.yaml", &chart),
                ("values.yaml", "{}\n"),
                ("crds/widgets.yaml", &crd),
                ("templates/widget.yaml", &widget),
            ],
        );
    }
    let gvk = kube::core::GroupVersionKind::gvk(&group, "v1", "Widget");
    kube::core::ApiResource::from_gvk_with_plural(&gvk, "widgets")
}
