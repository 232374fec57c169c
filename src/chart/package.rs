//! An unpacked chart: Chart.yaml, values.yaml, values.schema.json, templates and subcharts.

use serde::Deserialize;
use serde_json::Value;

/// A chart read into memory, with its subcharts.
#[derive(Clone, Debug)]
pub struct Package {
    /// Chart.yaml.
    pub metadata: ChartMetadata,
    /// values.yaml as JSON; an empty object when the chart has none.
    pub values: Value,
    /// values.schema.json as it is in the chart, if present.
    pub schema: Option<Value>,
    /// Every file under `templates/`, path relative to the chart root.
    pub templates: Vec<TemplateFile>,
    /// Charts under `charts/`, packed or unpacked.
    pub subcharts: Vec<Package>,
}

/// The parts of Chart.yaml compositor uses.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChartMetadata {
    /// `v1` or `v2`.
    pub api_version: String,
    /// Chart name.
    pub name: String,
    /// Chart version (SemVer 2).
    pub version: String,
    /// `application` (the default) or `library`.
    #[serde(default, rename = "type")]
    pub chart_type: ChartType,
    /// Chart.yaml description.
    #[serde(default)]
    pub description: Option<String>,
    /// Dependencies from Chart.yaml (v2) or requirements.yaml (v1).
    #[serde(default)]
    pub dependencies: Vec<Dependency>,
}

/// Whether a chart installs anything.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ChartType {
    /// A chart that renders resources.
    #[default]
    Application,
    /// A chart of helpers only; it has no values key in its parent.
    Library,
}

/// A subchart dependency.
#[derive(Clone, Debug, Deserialize)]
pub struct Dependency {
    /// The subchart's name.
    pub name: String,
    /// Version constraint.
    #[serde(default)]
    pub version: Option<String>,
    /// Repository URL.
    #[serde(default)]
    pub repository: Option<String>,
    /// The key under which the subchart's values live, when not `name`.
    #[serde(default)]
    pub alias: Option<String>,
    /// Values path that enables the subchart.
    #[serde(default)]
    pub condition: Option<String>,
}

impl Dependency {
    /// The key of this subchart's values in the parent's values.
    pub fn values_key(&self) -> &str {
        self.alias.as_deref().unwrap_or(&self.name)
    }
}

/// A file under `templates/`.
#[derive(Clone, Debug)]
pub struct TemplateFile {
    /// Path relative to the chart root, e.g. `templates/deployment.yaml`.
    pub path: String,
    /// File contents as text.
    pub content: String,
}
