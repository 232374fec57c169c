//! values.schema.json → structural OpenAPI v3 schema, and values validation.
//!
//! [`convert`] turns any chart schema into a schema the apiserver accepts as a CRD version's
//! `spec`, listing every lossy step as a [`Warning`]. [`validate`] checks values against the
//! original schema, so what the CRD cannot express is still enforced before an install.

mod convert;
mod defaults;
pub mod infer;
mod keywords;
mod merge;
mod refs;
mod structural;
mod validate;
mod warning;

#[cfg(test)]
mod tests;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;
use serde_json::{Map, Value};

pub use structural::structural_problems;
pub use validate::{PackageValidator, Violation, validate, validate_package};
pub use warning::Warning;

use crate::chart::{ChartType, Package};

/// The path of the chart's values in a custom resource; warnings start with it.
const ROOT: &str = "spec";

/// Errors of schema handling.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The chart's schema cannot be compiled by the JSON Schema validator.
    #[error("values.schema.json cannot be used for validation: {message}")]
    InvalidSchema {
        /// What the validator said.
        message: String,
    },
}

impl Error {
    /// A PascalCase reason for Kubernetes conditions and events.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::InvalidSchema { .. } => "InvalidSchema",
        }
    }
}

/// Choices of a conversion.
#[derive(Clone, Debug, Default)]
pub struct ConvertOptions {
    /// Keep schema defaults that validate (and default their parents to `{}`), so the
    /// apiserver fills them in; otherwise the chart's values.yaml stays the only source of
    /// defaults and schema defaults are dropped.
    pub apply_defaults: bool,
    /// When to infer the schema from values.yaml instead (see [`infer`]).
    pub infer: crate::api::SchemaInference,
    /// Dotted values paths an inferred schema leaves open to any value.
    pub open_keys: Vec<String>,
}

impl From<&crate::api::SchemaOptions> for ConvertOptions {
    fn from(options: &crate::api::SchemaOptions) -> Self {
        ConvertOptions {
            apply_defaults: options.apply_defaults,
            infer: options.infer,
            open_keys: options.open_keys.clone(),
        }
    }
}

/// Converts a chart's values schema into the structural schema of a CRD version's `spec`.
///
/// `values_schema` is parsed as generic JSON of any draft; `package` supplies values.yaml (for
/// `required` and the defaults shown in descriptions) and subcharts (whose values keys must
/// survive pruning, and whose schemas `$ref`s may point into).
pub fn convert(
    values_schema: &Value,
    package: &Package,
    options: &ConvertOptions,
) -> (JSONSchemaProps, Vec<Warning>) {
    let mut warnings = Vec::new();
    let mut root = refs::Inliner::new(&mut warnings).inline_document(values_schema, package, ROOT);
    add_subcharts(&mut root, package, &mut warnings);
    let mut converter = convert::Converter {
        warnings: &mut warnings,
        apply_defaults: options.apply_defaults,
        depth: 0,
    };
    let values = crate::chart::values::defaults(package);
    let mut spec = converter.convert(&root, ROOT, Some(&values));
    if spec.type_.as_deref() != Some("object") {
        if spec.type_.is_some() || spec.x_kubernetes_int_or_string.is_some() {
            warnings.push(Warning::new(
                ROOT,
                "type",
                "chart values are always an object; type replaced",
            ));
            spec = convert::any_value(Some("object"));
        } else {
            spec.type_ = Some("object".to_owned());
        }
    }
    // `spec` itself is never null (Helm always has values).
    spec.nullable = None;
    let mut seen = std::collections::HashSet::new();
    warnings.retain(|w| seen.insert(w.clone()));
    (spec, warnings)
}

/// Puts each subchart's values key into the root schema, with the subchart's own schema when
/// the package has it, marked so the converter keeps every key below it.
fn add_subcharts(root: &mut Value, package: &Package, warnings: &mut Vec<Warning>) {
    let mut keys: Vec<(String, Option<&Package>)> = Vec::new();
    for dep in &package.metadata.dependencies {
        let sub = package
            .subcharts
            .iter()
            .find(|s| s.metadata.name == dep.name);
        keys.push((dep.values_key().to_owned(), sub));
    }
    for sub in &package.subcharts {
        let declared = package
            .metadata
            .dependencies
            .iter()
            .any(|d| d.name == sub.metadata.name);
        if !declared {
            keys.push((sub.metadata.name.clone(), Some(sub)));
        }
    }
    if keys.is_empty() {
        return;
    }
    if !root.is_object() {
        // A boolean root schema: `true` accepts anything, which the converter preserves.
        return;
    }
    for (key, sub) in keys {
        if sub.is_some_and(|s| s.metadata.chart_type == ChartType::Library) {
            continue;
        }
        let path = warning::child(ROOT, &key);
        let mut entry = match sub.and_then(|s| s.schema.as_ref().map(|schema| (s, schema))) {
            Some((s, schema)) => refs::Inliner::new(warnings).inline_document(schema, s, &path),
            None => Value::Object(Map::from_iter([(
                "type".to_owned(),
                Value::String("object".to_owned()),
            )])),
        };
        if let Value::Object(m) = &mut entry {
            m.insert(convert::SUBCHART.to_owned(), Value::Bool(true));
        }
        let Some(root_map) = root.as_object_mut() else {
            return;
        };
        let properties = root_map
            .entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        let Some(properties) = properties.as_object_mut() else {
            continue;
        };
        let merged = match properties.remove(&key) {
            Some(existing) => Value::Object(Map::from_iter([(
                "allOf".to_owned(),
                Value::Array(vec![
                    Value::Object(Map::from_iter([(
                        convert::SUBCHART.to_owned(),
                        Value::Bool(true),
                    )])),
                    existing,
                    entry,
                ]),
            )])),
            None => entry,
        };
        properties.insert(key, merged);
    }
}
