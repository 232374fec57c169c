//! Values validation against the chart's original schema, before every install.
//!
//! The CRD carries only what a structural schema can express; this check restores the rest
//! (`oneOf`, `if`/`then`, `patternProperties`, …) with a full JSON Schema validator.

use serde_json::Value;

use super::Error;
use super::infer::{HOW_TO_OPEN, INFERRED};
use crate::chart::Package;
use crate::chart::values::{self, Coalesced, Enabling, Subchart};

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

/// Validates `values` as Helm does: coalesced with the chart's defaults and those of the
/// subcharts that take part, against the chart's schema, then each such subchart's values
/// (under its alias or name) against that subchart's schema, recursively. References to
/// `charts/<name>/values.schema.json` resolve to the subcharts in the package.
pub fn validate_package(values: &Value, package: &Package) -> Result<Vec<Violation>, Error> {
    let coalesced = values::coalesced(package, values, Enabling::ByValues);
    Ok(PackageValidator::new(package)?.validate(&coalesced))
}

/// A chart's schemas compiled once, for every composition's values: compiling (its regular
/// expressions above all) costs far more than validating.
pub struct PackageValidator {
    own: Option<jsonschema::Validator>,
    /// The chart's schema when it was inferred: its nodes say what they were inferred from.
    inferred: Option<Value>,
    /// Each subchart's, in the order of the package's `subcharts`.
    subcharts: Vec<PackageValidator>,
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
            .map(PackageValidator::new)
            .collect::<Result<_, Error>>()?;
        let inferred = package
            .schema
            .clone()
            .filter(|schema| schema.get(INFERRED).is_some());
        Ok(PackageValidator {
            own,
            inferred,
            subcharts,
        })
    }

    /// Every way values, coalesced as Helm does (see [`values::coalesced`]), break the schemas
    /// of the chart and of the subcharts that take part.
    pub fn validate(&self, coalesced: &Coalesced) -> Vec<Violation> {
        self.validate_tree(&coalesced.values, &coalesced.subcharts)
    }

    fn validate_tree(&self, values: &Value, subcharts: &[Subchart]) -> Vec<Violation> {
        let mut out = match &self.own {
            Some(validator) => violations(validator, values, self.inferred.as_ref()),
            None => Vec::new(),
        };
        for subchart in subcharts {
            let Some(validator) = self.subcharts.get(subchart.index) else {
                continue;
            };
            let found = match values.get(&subchart.key) {
                None | Some(Value::Null) => continue,
                Some(Value::Object(_)) => {
                    validator.validate_tree(&values[&subchart.key], &subchart.subcharts)
                }
                Some(_) => vec![Violation {
                    path: String::new(),
                    message: "the values of a subchart must be an object".to_owned(),
                }],
            };
            out.extend(found.into_iter().map(|v| under(&subchart.key, v)));
        }
        out
    }
}

/// `violation` of a subchart's values, with its path from the parent's values.
fn under(key: &str, violation: Violation) -> Violation {
    let path = match violation.path.as_str() {
        "" => key.to_owned(),
        quoted if quoted.starts_with('[') => format!("{key}{quoted}"),
        dotted => format!("{key}.{dotted}"),
    };
    Violation { path, ..violation }
}

fn validate_with(
    values: &Value,
    schema: &Value,
    subcharts: SubchartSchemas,
) -> Result<Vec<Violation>, Error> {
    Ok(violations(&compile(schema, subcharts)?, values, None))
}

fn compile(schema: &Value, subcharts: SubchartSchemas) -> Result<jsonschema::Validator, Error> {
    jsonschema::options()
        .with_retriever(subcharts)
        .build(schema)
        .map_err(|e| Error::InvalidSchema {
            message: e.masked().to_string(),
        })
}

/// Every violation; those of a node of an `inferred` schema say what it was inferred from.
fn violations(
    validator: &jsonschema::Validator,
    values: &Value,
    inferred: Option<&Value>,
) -> Vec<Violation> {
    validator
        .iter_errors(values)
        .map(|e| {
            let mut message = e.masked().to_string();
            if let Some(why) = inferred.and_then(|s| inferred_by(s, e.schema_path().as_str())) {
                message = format!("{message} ({why}; {HOW_TO_OPEN})");
            }
            Violation {
                path: dotted(e.instance_path().as_str()),
                message,
            }
        })
        .collect()
}

/// What the node whose keyword `keyword_path` points at was inferred from.
fn inferred_by<'s>(schema: &'s Value, keyword_path: &str) -> Option<&'s str> {
    let (node, _keyword) = keyword_path.rsplit_once('/')?;
    schema.pointer(node)?.get(INFERRED)?.as_str()
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
    use crate::chart::Dependency;
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

    /// A chart named `name` with `values`, `schema` and `subcharts`.
    fn chart(name: &str, values: Value, schema: Option<Value>, subcharts: Vec<Package>) -> Package {
        let mut package = Package::bare(name, values);
        package.schema = schema;
        package.subcharts = subcharts;
        package
    }

    fn dependency(name: &str, alias: Option<&str>, condition: Option<&str>) -> Dependency {
        Dependency {
            name: name.to_owned(),
            version: Some("1.0.0".to_owned()),
            alias: alias.map(str::to_owned),
            condition: condition.map(str::to_owned),
            ..Dependency::default()
        }
    }

    fn paths(violations: &[Violation]) -> Vec<&str> {
        violations.iter().map(|v| v.path.as_str()).collect()
    }

    #[test]
    fn subchart_refs_resolve_and_subchart_values_are_checked() {
        let db_schema = json!({"type": "object", "properties": {"port": {"type": "integer"}}});
        let sub = chart("db", json!({}), Some(db_schema), Vec::new());
        let copy = json!({"type": "object", "properties": {"copy": {"$ref": "charts/db/values.schema.json"}}});
        let mut parent = chart("app", json!({}), Some(copy), vec![sub]);
        parent.metadata.dependencies = vec![dependency("db", Some("database"), None)];
        let v = validate_package(
            &json!({"copy": {"port": "x"}, "database": {"port": "y"}}),
            &parent,
        )
        .unwrap();
        assert_eq!(paths(&v), ["copy.port", "database.port"]);
    }

    #[test]
    fn what_a_subchart_requires_may_come_from_its_own_defaults_and_globals() {
        let web_schema = json!({
            "type": "object",
            "required": ["replicaCount", "image", "global"],
            "properties": {"global": {"required": ["region"]}}
        });
        let web = chart(
            "web",
            json!({"replicaCount": 1, "image": {"repository": "web"}}),
            Some(web_schema),
            Vec::new(),
        );
        let mut parent = chart("app", json!({"global": {"region": "eu"}}), None, vec![web]);
        parent.metadata.dependencies = vec![dependency("web", None, None)];
        assert_eq!(validate_package(&json!({}), &parent).unwrap(), []);
        let v = validate_package(&json!({"web": {"image": null}}), &parent).unwrap();
        assert_eq!(paths(&v), ["web"]);
        assert!(v[0].message.contains("image"), "{v:?}");
    }

    #[test]
    fn a_subchart_left_out_is_not_checked() {
        let db_schema = json!({"type": "object", "required": ["password"]});
        let db = chart("db", json!({}), Some(db_schema), Vec::new());
        let mut parent = chart("app", json!({"db": {"enabled": false}}), None, vec![db]);
        parent.metadata.dependencies = vec![dependency("db", None, Some("db.enabled"))];
        assert_eq!(validate_package(&json!({}), &parent).unwrap(), []);
        let on = validate_package(&json!({"db": {"enabled": true}}), &parent).unwrap();
        assert_eq!(paths(&on), ["db"]);
    }

    #[test]
    fn a_subcharts_values_must_be_an_object() {
        let db = chart("db", json!({}), None, Vec::new());
        let parent = chart("app", json!({}), None, vec![db]);
        let v = validate_package(&json!({"db": [1]}), &parent).unwrap();
        assert_eq!(paths(&v), ["db"]);
    }

    #[test]
    fn broken_schema_is_an_error() {
        let err = validate(&json!({}), &json!({"type": 7})).unwrap_err();
        assert_eq!(err.reason(), "InvalidSchema");
    }
}
