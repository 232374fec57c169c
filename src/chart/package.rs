//! An unpacked chart: Chart.yaml, values.yaml, values.schema.json, templates and subcharts.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::Error;
use super::archive::{self, Budget, Files, Limits};
use super::version;

/// A chart read into memory, with its subcharts.
#[derive(Clone, Debug)]
pub struct Package {
    /// Chart.yaml.
    pub metadata: ChartMetadata,
    /// values.yaml as JSON; an empty object when the chart has none.
    pub values: Value,
    /// values.yaml as written, comments included (they describe the values); empty when the
    /// chart has none.
    pub values_text: String,
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
    /// `v1` or `v2` (`v1` when Chart.yaml does not say).
    #[serde(default)]
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
#[derive(Clone, Debug, Default, Deserialize)]
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
    /// Values paths (comma-separated) whose first boolean enables or disables the subchart.
    #[serde(default)]
    pub condition: Option<String>,
    /// Names under the values' `tags` that enable or disable the subchart.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Values of the subchart copied into the parent's defaults.
    #[serde(default, rename = "import-values")]
    pub import_values: Vec<ImportValues>,
}

/// One entry of a dependency's `import-values`.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum ImportValues {
    /// `name`: the subchart's `exports.name` table, into the parent's values root.
    Exports(String),
    /// `{child, parent}`: the subchart's `child` table, at `parent` in the parent's values
    /// (`.` for the root).
    Path {
        /// Dotted path of a table in the subchart's values.
        child: String,
        /// Dotted path in the parent's values.
        parent: String,
    },
    /// Anything else, which Helm ignores as well.
    Other(serde::de::IgnoredAny),
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

/// `requirements.yaml` of an `apiVersion: v1` chart.
#[derive(Deserialize)]
struct Requirements {
    #[serde(default)]
    dependencies: Vec<Dependency>,
}

impl Package {
    /// Reads a chart from a directory or a `.tgz` file, with the default [`Limits`].
    pub fn load(path: &Path) -> Result<Package, Error> {
        Self::load_with_limits(path, Limits::default())
    }

    /// Reads a chart from a directory or a `.tgz` file.
    pub fn load_with_limits(path: &Path, limits: Limits) -> Result<Package, Error> {
        let chart = path.display().to_string();
        let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::ChartNotFound {
                url: chart.clone(),
                chart: chart.clone(),
            },
            _ => Error::io(path, e),
        })?;
        let mut budget = Budget::new(limits);
        if meta.is_dir() {
            let files = archive::read_dir(path, &chart, &mut budget)?;
            parse(files, &chart, "", &mut budget, 0)
        } else {
            if meta.len() > limits.max_archive_size {
                return Err(Error::too_large(
                    chart,
                    format!("archive is larger than {} bytes", limits.max_archive_size),
                ));
            }
            let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
            Self::from_archive_named(&bytes, &chart, limits)
        }
    }

    /// Reads a chart from the bytes of a `.tgz`, with the default [`Limits`].
    pub fn from_archive(bytes: &[u8]) -> Result<Package, Error> {
        Self::from_archive_named(bytes, "<archive>", Limits::default())
    }

    /// Reads a chart from the bytes of a `.tgz`; `chart` names it in errors (a URL and version,
    /// or a path).
    pub fn from_archive_named(bytes: &[u8], chart: &str, limits: Limits) -> Result<Package, Error> {
        let mut budget = Budget::new(limits);
        let files = archive::read_archive(bytes, chart, "", &mut budget)?;
        parse(files, chart, "", &mut budget, 0)
    }

    /// The chart name from Chart.yaml.
    pub fn name(&self) -> &str {
        &self.metadata.name
    }

    /// The chart version from Chart.yaml.
    pub fn version(&self) -> &str {
        &self.metadata.version
    }

    /// Whether installing the chart can create anything: an application chart with at least one
    /// manifest template (not a `_helper`, not `NOTES.txt`) here or in a subchart.
    pub fn renders_objects(&self) -> bool {
        let manifest = |t: &TemplateFile| {
            let file = t.path.rsplit('/').next().unwrap_or_default();
            !file.starts_with('_') && file != "NOTES.txt"
        };
        self.metadata.chart_type == ChartType::Application
            && (self.templates.iter().any(manifest)
                || self.subcharts.iter().any(Package::renders_objects))
    }

    /// This chart's templates and those of every subchart, recursively, with paths relative to
    /// this chart's root (e.g. `charts/redis/templates/service.yaml`).
    pub fn all_templates(&self) -> Vec<TemplateFile> {
        let mut out = self.templates.clone();
        for sub in &self.subcharts {
            for t in sub.all_templates() {
                out.push(TemplateFile {
                    path: format!("charts/{}/{}", sub.metadata.name, t.path),
                    content: t.content,
                });
            }
        }
        out
    }
}

#[cfg(test)]
impl Package {
    /// An application chart named `name`, version 1.0.0, with `values` and nothing else.
    pub(crate) fn bare(name: &str, values: Value) -> Package {
        Package {
            metadata: ChartMetadata {
                api_version: "v2".to_owned(),
                name: name.to_owned(),
                version: "1.0.0".to_owned(),
                chart_type: ChartType::Application,
                description: None,
                dependencies: Vec::new(),
            },
            values,
            values_text: String::new(),
            schema: None,
            templates: Vec::new(),
            subcharts: Vec::new(),
        }
    }
}

/// Builds a package from its files. `prefix` locates this chart inside the top-level one, for
/// error messages.
fn parse(
    mut files: Files,
    chart: &str,
    prefix: &str,
    budget: &mut Budget,
    depth: usize,
) -> Result<Package, Error> {
    let metadata = metadata(&files, chart, prefix)?;
    let values_text = files
        .get("values.yaml")
        .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
        .unwrap_or_default();
    let values = values(&files, chart, prefix)?;
    let schema = match files.get("values.schema.json") {
        None => None,
        Some(bytes) => Some(serde_json::from_slice::<Value>(bytes).map_err(|e| {
            Error::invalid(
                chart,
                format!("{prefix}values.schema.json"),
                format!("invalid JSON: {e}"),
            )
        })?),
    };
    let templates = files
        .range("templates/".to_string()..)
        .take_while(|(path, _)| path.starts_with("templates/"))
        .map(|(path, content)| TemplateFile {
            path: path.clone(),
            content: String::from_utf8_lossy(content).into_owned(),
        })
        .collect();
    let subcharts = subcharts(&mut files, chart, prefix, budget, depth)?;
    Ok(Package {
        metadata,
        values,
        values_text,
        schema,
        templates,
        subcharts,
    })
}

/// Chart.yaml, checked, with a v1 chart's `requirements.yaml` as its dependencies.
fn metadata(files: &Files, chart: &str, prefix: &str) -> Result<ChartMetadata, Error> {
    let at = |file: &str| format!("{prefix}{file}");
    let chart_yaml = files
        .get("Chart.yaml")
        .ok_or_else(|| Error::invalid(chart, at("Chart.yaml"), "missing"))?;
    let mut metadata: ChartMetadata =
        yaml(chart_yaml).map_err(|e| Error::invalid(chart, at("Chart.yaml"), e))?;
    if metadata.api_version.is_empty() {
        metadata.api_version = "v1".to_string();
    }
    if !matches!(metadata.api_version.as_str(), "v1" | "v2") {
        return Err(Error::invalid(
            chart,
            at("Chart.yaml"),
            format!("unsupported apiVersion {:?}", metadata.api_version),
        ));
    }
    if metadata.name.is_empty() || metadata.name.contains(['/', '\\']) || metadata.name == ".." {
        return Err(Error::invalid(
            chart,
            at("Chart.yaml"),
            format!("invalid chart name {:?}", metadata.name),
        ));
    }
    if version::parse_version(&metadata.version).is_none() {
        return Err(Error::invalid(
            chart,
            at("Chart.yaml"),
            format!("version {:?} is not a SemVer version", metadata.version),
        ));
    }
    if metadata.api_version == "v1"
        && metadata.dependencies.is_empty()
        && let Some(requirements) = files.get("requirements.yaml")
    {
        let requirements: Option<Requirements> =
            yaml(requirements).map_err(|e| Error::invalid(chart, at("requirements.yaml"), e))?;
        metadata.dependencies = requirements.map(|r| r.dependencies).unwrap_or_default();
    }
    Ok(metadata)
}

/// values.yaml as JSON: a mapping, or an empty one when the file is missing or empty.
fn values(files: &Files, chart: &str, prefix: &str) -> Result<Value, Error> {
    let Some(bytes) = files.get("values.yaml") else {
        return Ok(Value::Object(Default::default()));
    };
    let at = format!("{prefix}values.yaml");
    let value: Option<Value> = yaml(bytes).map_err(|e| Error::invalid(chart, &at, e))?;
    match value {
        None | Some(Value::Null) => Ok(Value::Object(Default::default())),
        Some(v @ Value::Object(_)) => Ok(v),
        Some(_) => Err(Error::invalid(chart, at, "values must be a mapping")),
    }
}

/// The subcharts under `charts/`, taken out of `files`: `charts/<name>.tgz` or
/// `charts/<name>/…`. Like Helm, names starting with `_` or `.` and provenance files are
/// skipped.
fn subcharts(
    files: &mut Files,
    chart: &str,
    prefix: &str,
    budget: &mut Budget,
    depth: usize,
) -> Result<Vec<Package>, Error> {
    let mut packed: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut unpacked: BTreeMap<String, Files> = BTreeMap::new();
    let chart_files: Vec<String> = files
        .keys()
        .filter(|p| p.starts_with("charts/"))
        .cloned()
        .collect();
    for path in chart_files {
        let Some(content) = files.remove(&path) else {
            continue;
        };
        let rest = &path["charts/".len()..];
        let (name, inner) = match rest.split_once('/') {
            Some((name, inner)) => (name, Some(inner)),
            None => (rest, None),
        };
        if name.starts_with(['_', '.']) || name.ends_with(".prov") {
            continue;
        }
        match inner {
            Some(inner) => {
                unpacked
                    .entry(name.to_string())
                    .or_default()
                    .insert(inner.to_string(), content);
            }
            None if name.ends_with(".tgz") || name.ends_with(".tar.gz") => {
                packed.insert(name.to_string(), content);
            }
            None => {}
        }
    }
    if (!packed.is_empty() || !unpacked.is_empty()) && depth >= budget.limits.max_depth {
        return Err(Error::too_large(
            chart,
            format!(
                "{}subcharts nested deeper than {} levels",
                prefix, budget.limits.max_depth
            ),
        ));
    }
    let mut subcharts = Vec::new();
    for (name, files) in unpacked {
        let sub_prefix = format!("{prefix}charts/{name}/");
        subcharts.push(parse(files, chart, &sub_prefix, budget, depth + 1)?);
    }
    for (name, bytes) in packed {
        let sub_prefix = format!("{prefix}charts/{name}:");
        let files = archive::read_archive(&bytes, chart, &sub_prefix, budget)?;
        subcharts.push(parse(files, chart, &sub_prefix, budget, depth + 1)?);
    }
    Ok(subcharts)
}

/// Parses YAML from bytes with serde-saphyr (which bounds aliases and nesting).
fn yaml<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    serde_saphyr::from_str(text).map_err(|e| e.to_string())
}

#[cfg(test)]
#[path = "package_tests.rs"]
mod tests;
