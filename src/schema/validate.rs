//! Values validation against the chart's original schema, before every install.
//!
//! The CRD carries only what a structural schema can express; this check restores the rest
//! (`oneOf`, `if`/`then`, `patternProperties`, …) with a full JSON Schema validator.

use serde_json::Value;

use super::Error;
use crate::chart::Package;

/// One way the values break the schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Where in the values, dotted (`image.tag`, `ports[0].name`); empty for the root.
    pub path: String,
    /// What is wrong, without the offending value (values may hold secrets).
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Validates `values` against `schema` (any draft the `jsonschema` crate supports, detected from
/// `$schema`). References outside the schema are not fetched; such a schema is an error.
pub fn validate(values: &Value, schema: &Value) -> Result<Vec<Violation>, Error> {
    validate_with(values, schema, SubchartSchemas(Vec::new()))
}

/// Validates `values` as Helm does: against the chart's schema, then each subchart's values
/// (under its alias or name) against that subchart's schema, recursively. References to
/// `charts/<name>/values.schema.json` resolve to the subcharts in the package.
pub fn validate_package(values: &Value, package: &Package) -> Result<Vec<Violation>, Error> {
    Ok(PackageValidator::new(package)?.validate(values))
}

/// A chart's schemas compiled once, for every composition's values: compiling (its regular
/// expressions above all) costs far more than validating.
pub struct PackageValidator {
    own: Option<jsonschema::Validator>,
    /// Each subchart's, with the key of its values.
    subcharts: Vec<(String, PackageValidator)>,
}

impl PackageValidator {
    /// Compiles the schemas of `package` and its subcharts.
    pub fn new(package: &Package) -> Result<Self, Error> {
        let own = match &package.schema {
            Some(schema) => Some(compile(schema, SubchartSchemas::of(package))?),
            None => None,
        };
        let subcharts = package
            .subcharts
            .iter()
            .map(|sub| {
                Ok((
                    package.values_key_of(sub).to_owned(),
                    PackageValidator::new(sub)?,
                ))
            })
            .collect::<Result<_, Error>>()?;
        Ok(PackageValidator { own, subcharts })
    }

    /// Every way `values` break the schemas, as [`validate_package`] says.
    pub fn validate(&self, values: &Value) -> Vec<Violation> {
        let mut out = match &self.own {
            Some(validator) => violations(validator, values),
            None => Vec::new(),
        };
        for (key, sub) in &self.subcharts {
            let Some(sub_values) = values.get(key) else {
                continue;
            };
            for v in sub.validate(sub_values) {
                let path = if v.path.is_empty() {
                    key.clone()
                } else {
                    format!("{key}.{}", v.path)
                };
                out.push(Violation { path, ..v });
            }
        }
        out
    }
}

fn validate_with(
    values: &Value,
    schema: &Value,
    subcharts: SubchartSchemas,
) -> Result<Vec<Violation>, Error> {
    Ok(violations(&compile(schema, subcharts)?, values))
}

fn compile(schema: &Value, subcharts: SubchartSchemas) -> Result<jsonschema::Validator, Error> {
    jsonschema::options()
        .with_retriever(subcharts)
        .build(schema)
        .map_err(|e| Error::InvalidSchema {
            message: e.masked().to_string(),
        })
}

fn violations(validator: &jsonschema::Validator, values: &Value) -> Vec<Violation> {
    validator
        .iter_errors(values)
        .map(|e| Violation {
            path: dotted(e.instance_path().as_str()),
            message: e.masked().to_string(),
        })
        .collect()
}

/// Serves the schemas of a package's subcharts to `$ref`s; never fetches anything.
struct SubchartSchemas(Vec<(String, Value)>);

impl SubchartSchemas {
    fn of(package: &Package) -> Self {
        Self(
            package
                .subcharts
                .iter()
                .filter_map(|s| Some((s.metadata.name.clone(), s.schema.clone()?)))
                .collect(),
        )
    }
}

impl jsonschema::Retrieve for SubchartSchemas {
    fn retrieve(
        &self,
        uri: &jsonschema::Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        let wanted = uri.as_str();
        self.0
            .iter()
            .find(|(name, _)| wanted.ends_with(&format!("/charts/{name}/values.schema.json")))
            .map(|(_, schema)| schema.clone())
            .ok_or_else(|| format!("{wanted} is not a schema inside the chart").into())
    }
}

/// `/a/b/0/c~1d` → `a.b[0]["c/d"]`.
fn dotted(pointer: &str) -> String {
    let mut out = String::new();
    for raw in pointer.split('/').skip(1) {
        let seg = raw.replace("~1", "/").replace("~0", "~");
        if !seg.is_empty() && seg.chars().all(|c| c.is_ascii_digit()) {
            out.push_str(&format!("[{seg}]"));
        } else if out.is_empty() {
            out = super::warning::child("", &seg)
                .trim_start_matches('.')
                .to_owned();
        } else {
            out = super::warning::child(&out, &seg);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn violations_have_dotted_paths() {
        let schema = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"image": {"type": "object", "properties": {"tag": {"type": "string"}}}},
            "oneOf": [{"required": ["a"]}, {"required": ["b"]}]
        });
        let v = validate(&json!({"image": {"tag": 3}, "a": 1}), &schema).unwrap();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].path, "image.tag");
        assert!(
            validate(&json!({"image": {"tag": "x"}, "a": 1}), &schema)
                .unwrap()
                .is_empty()
        );
        let v = validate(&json!({"a": 1, "b": 2}), &schema).unwrap();
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].path, "");
    }

    #[test]
    fn paths_quote_odd_keys_and_index_lists() {
        assert_eq!(dotted("/a/b/0/c~1d"), "a.b[0][\"c/d\"]");
        assert_eq!(dotted(""), "");
    }

    #[test]
    fn subchart_refs_resolve_and_subchart_values_are_checked() {
        use crate::chart::{ChartMetadata, ChartType, Dependency};
        let metadata = |name: &str| ChartMetadata {
            api_version: "v2".to_owned(),
            name: name.to_owned(),
            version: "1.0.0".to_owned(),
            chart_type: ChartType::Application,
            description: None,
            dependencies: Vec::new(),
        };
        let sub = Package {
            metadata: metadata("db"),
            values: json!({}),
            schema: Some(json!({"type": "object", "properties": {"port": {"type": "integer"}}})),
            templates: Vec::new(),
            subcharts: Vec::new(),
        };
        let mut parent = Package {
            metadata: metadata("app"),
            values: json!({}),
            schema: Some(
                json!({"type": "object", "properties": {"copy": {"$ref": "charts/db/values.schema.json"}}}),
            ),
            templates: Vec::new(),
            subcharts: vec![sub],
        };
        parent.metadata.dependencies = vec![Dependency {
            name: "db".to_owned(),
            version: None,
            repository: None,
            alias: Some("database".to_owned()),
            condition: None,
        }];
        let v = validate_package(
            &json!({"copy": {"port": "x"}, "database": {"port": "y"}}),
            &parent,
        )
        .unwrap();
        let paths: Vec<&str> = v.iter().map(|v| v.path.as_str()).collect();
        assert_eq!(paths, ["copy.port", "database.port"]);
    }

    #[test]
    fn broken_schema_is_an_error() {
        let err = validate(&json!({}), &json!({"type": 7})).unwrap_err();
        assert_eq!(err.reason(), "InvalidSchema");
    }
}
