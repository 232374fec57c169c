//! A values schema inferred from a chart's values.yaml, for charts without values.schema.json.
//!
//! The schema is plain JSON Schema, set as the chart's own: the converter turns it into the
//! CRD's structural schema, the controller validates values with it, and version bumps compare
//! it like a declared one. Each node's type comes from its default (see [`Rule`] for every
//! choice), its description from the comments above the key ([`comments`]), and whether a map
//! refuses unknown keys from how the templates read it ([`templates`]). Subcharts' values.yaml
//! files are read under their keys, as Helm coalesces them.
//!
//! Nodes that can refuse a value carry [`INFERRED`], which validation messages quote, so that a
//! user refused by a guess learns it was one and how to undo it.

mod agreement;
mod comments;
mod report;
mod templates;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::ConvertOptions;
use crate::api::SchemaInference;
use crate::chart::{ChartType, Package};
use comments::Comment;
use report::{Root, Rule};
use templates::References;

pub use agreement::{Agreement, agreement};
pub use report::Report;

/// Marks an inferred node that can refuse a value; its text says what it was inferred from.
pub(crate) const INFERRED: &str = "x-compositor-inferred";

/// What `kubectl explain` says of an inferred `spec`, after the chart's description.
pub const ABOUT: &str = "Inferred from the chart's values.yaml and its comments: each type is \
    that of the field's default, and maps the templates read key by key refuse unknown keys. \
    List a path in the definition's spec.schema.openKeys to accept any value there.";

/// What a user refused by an inferred rule can do about it.
pub(crate) const HOW_TO_OPEN: &str = "set spec.schema.openKeys to keep it open";

/// Kubernetes fields that take an integer or a string (`IntOrString`), by key name. Ports are
/// not among them: charts disagree on whether theirs may be named (probes) or not (Services).
const INT_OR_STRING: &[&str] = &["maxSurge", "maxUnavailable", "minAvailable", "targetPort"];

/// A chart with an inferred schema.
#[derive(Clone, Debug)]
pub struct Inferred {
    /// The chart, its `schema` replaced by the inferred one.
    pub package: Package,
    /// What was inferred and how.
    pub report: Report,
}

/// The chart with an inferred schema, when `options` ask for one for this chart: always with
/// `Always`, with `WhenMissing` only when the chart has no values.schema.json.
pub fn when_asked(package: &Package, options: &ConvertOptions) -> Option<Inferred> {
    let wanted = match options.infer {
        SchemaInference::Always => true,
        SchemaInference::WhenMissing => package.schema.is_none(),
        SchemaInference::Never => false,
    };
    wanted.then(|| infer(package, &options.open_keys))
}

/// Infers the values schema of `package` (and its subcharts, under their keys) from its
/// values.yaml files; `open_keys` are dotted paths that accept any value (`.` for all).
pub fn infer(package: &Package, open_keys: &[String]) -> Inferred {
    let keys = subchart_keys(package);
    let mut walker = Walker {
        refs: References::of(package, &keys),
        comments: BTreeMap::new(),
        open_keys: open_keys
            .iter()
            .map(|k| k.trim_matches('.').to_owned())
            .collect(),
        matched: BTreeSet::new(),
        subcharts: BTreeSet::new(),
        report: Report {
            declared: package.schema.is_some(),
            ..Report::default()
        },
    };
    walker.read_chart(package, "");
    let mut values = crate::chart::values::defaults(package);
    // Helm reads `tags` to enable tagged subcharts even when values.yaml has none.
    let tagged = package
        .metadata
        .dependencies
        .iter()
        .any(|d| !d.tags.is_empty());
    if tagged && let Some(map) = values.as_object_mut() {
        map.entry("tags").or_insert_with(|| json!({}));
    }
    let schema = walker.root(&values);
    let mut report = walker.report;
    report.unmatched = walker
        .open_keys
        .difference(&walker.matched)
        .cloned()
        .collect();
    let mut inferred = package.clone();
    inferred.schema = Some(schema);
    Inferred {
        package: inferred,
        report,
    }
}

/// Each application subchart's index among `package.subcharts` with the values key it takes:
/// its dependency's alias or name, or its own name when no dependency names it.
pub(crate) fn subchart_keys(package: &Package) -> Vec<(usize, String)> {
    let mut keys = Vec::new();
    for (index, sub) in package.subcharts.iter().enumerate() {
        if sub.metadata.chart_type == ChartType::Library {
            continue;
        }
        let named: Vec<String> = package
            .metadata
            .dependencies
            .iter()
            .filter(|d| d.name == sub.metadata.name)
            .map(|d| d.values_key().to_owned())
            .collect();
        if named.is_empty() {
            keys.push((index, sub.metadata.name.clone()));
        }
        keys.extend(named.into_iter().map(|key| (index, key)));
    }
    keys
}

/// Walks the coalesced defaults, building one schema node per value.
struct Walker {
    refs: References,
    comments: BTreeMap<String, Comment>,
    open_keys: BTreeSet<String>,
    /// The open keys that named a node.
    matched: BTreeSet<String>,
    /// Paths of subcharts' values.
    subcharts: BTreeSet<String>,
    report: Report,
}

/// `path` + `key`, dotted.
fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

impl Walker {
    /// Reads the comments of `package`'s values.yaml and, under their keys, its subcharts'.
    /// The parent's comments win: its values.yaml is what its users read.
    fn read_chart(&mut self, package: &Package, prefix: &str) {
        let dotted = if prefix.is_empty() {
            String::new()
        } else {
            format!("{prefix}.")
        };
        for (path, comment) in comments::descriptions(&package.values_text, &dotted) {
            self.comments.entry(path).or_insert(comment);
        }
        for (index, key) in subchart_keys(package) {
            let path = child(prefix, &key);
            self.subcharts.insert(path.clone());
            self.read_chart(&package.subcharts[index], &path);
        }
    }

    /// The schema of the whole values: an object whose unknown keys are refused, unless a
    /// template reads `.Values` whole or `spec.schema.openKeys` opens it.
    fn root(&mut self, values: &Value) -> Value {
        let empty = Map::new();
        let map = values.as_object().unwrap_or(&empty);
        if self.open_keys.contains("") {
            self.matched.insert(String::new());
            self.report.root = Root::Open;
            return json!({"type": "object", INFERRED: "inferred from values.yaml"});
        }
        let properties = self.properties("", &[map], false);
        let mut schema = json!({"type": "object", "properties": properties});
        schema[INFERRED] = json!("inferred from values.yaml");
        match self.refs.dynamic.clone() {
            Some(file) => self.report.root = Root::Dynamic(file),
            None => {
                schema["additionalProperties"] = Value::Bool(false);
                schema[INFERRED] =
                    json!("unknown keys refused: the top-level keys are values.yaml's");
            }
        }
        schema
    }

    /// The schema of the value at `path`, from every value it takes there (one default, or
    /// the elements of a list), counted in the report.
    fn node(&mut self, path: &str, values: &[&Value], in_list: bool) -> Value {
        if self.open_keys.contains(path) {
            self.matched.insert(path.to_owned());
            self.report.count(Rule::OpenKey);
            return self.described(json!({}), path, Rule::OpenKey, values);
        }
        let (schema, rule) = self.shape(path, values, in_list);
        self.report.count(rule);
        self.described(schema, path, rule, values)
    }

    /// The schema of the values at `path`, and the rule that gave it.
    fn shape(&mut self, path: &str, values: &[&Value], in_list: bool) -> (Value, Rule) {
        let present: Vec<&Value> = values.iter().copied().filter(|v| !v.is_null()).collect();
        let nullable = present.len() < values.len();
        let (mut schema, rule) = if present.is_empty() {
            self.null(path)
        } else if present.iter().all(|v| v.is_object()) {
            let maps: Vec<&Map<String, Value>> =
                present.iter().filter_map(|v| v.as_object()).collect();
            self.map(path, &maps, in_list)
        } else if present.iter().all(|v| v.is_array()) {
            let items: Vec<&Value> = present
                .iter()
                .filter_map(|v| v.as_array())
                .flatten()
                .collect();
            self.list(path, &items)
        } else {
            scalar(path, &present, &self.refs)
        };
        if nullable && let Some(t) = schema.get("type").cloned() {
            let mut types = match t {
                Value::Array(types) => types,
                one => vec![one],
            };
            types.push(json!("null"));
            schema["type"] = Value::Array(types);
        }
        (schema, rule)
    }

    /// A `null` default: any value, unless its comment names a type.
    fn null(&self, path: &str) -> (Value, Rule) {
        match self.comments.get(path).and_then(|c| c.hint) {
            Some(hint) => (json!({"type": hint}), Rule::NullHinted),
            None => (json!({}), Rule::Null),
        }
    }

    fn map(&mut self, path: &str, maps: &[&Map<String, Value>], in_list: bool) -> (Value, Rule) {
        if maps.iter().all(|m| m.is_empty()) {
            return (json!({"type": "object"}), Rule::EmptyMap);
        }
        let properties = self.properties(path, maps, in_list);
        let global = path.split('.').any(|key| key == "global");
        let rule = if self.subcharts.contains(path) {
            Rule::Subchart
        } else if in_list {
            Rule::MapInList
        } else if global {
            Rule::Global
        } else if self.refs.read_by_key(path) {
            Rule::ClosedMap
        } else if self.refs.read_whole(path) {
            Rule::MapUsedWhole
        } else {
            Rule::MapUnread
        };
        let mut schema = json!({"type": "object", "properties": properties});
        if rule == Rule::ClosedMap {
            schema["additionalProperties"] = Value::Bool(false);
        }
        (schema, rule)
    }

    /// One node per key of any of `maps`, from the values that key takes in them.
    fn properties(
        &mut self,
        path: &str,
        maps: &[&Map<String, Value>],
        in_list: bool,
    ) -> Map<String, Value> {
        let mut keys: Vec<&String> = Vec::new();
        for key in maps.iter().flat_map(|m| m.keys()) {
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        let mut properties = Map::new();
        for key in keys {
            let values: Vec<&Value> = maps.iter().filter_map(|m| m.get(key)).collect();
            let node = self.node(&child(path, key), &values, in_list);
            properties.insert(key.clone(), node);
        }
        properties
    }

    /// A list: items typed from its elements (not counted as paths of their own), or any
    /// items when it has none.
    fn list(&mut self, path: &str, items: &[&Value]) -> (Value, Rule) {
        if items.is_empty() {
            return (json!({"type": "array"}), Rule::OpenList);
        }
        let item_path = format!("{path}[*]");
        let (mut schema, rule) = self.shape(&item_path, items, true);
        if !rule.refuses() && rule != Rule::MapInList {
            return (json!({"type": "array"}), Rule::OpenList);
        }
        if rule.refuses() {
            schema[INFERRED] = json!("inferred from the elements of the values.yaml list");
        }
        (json!({"type": "array", "items": schema}), Rule::TypedList)
    }

    /// `schema` with the description its comment and rule give it.
    fn described(&mut self, mut schema: Value, path: &str, rule: Rule, values: &[&Value]) -> Value {
        let mut text = Vec::new();
        if let Some(comment) = self.comments.get(path) {
            *self.report.descriptions.entry(comment.source).or_default() += 1;
            if !comment.text.is_empty() {
                text.push(comment.text.clone());
            }
        }
        if rule.refuses() {
            // Short: it is repeated on every typed field, and the CRD's size is bounded.
            text.push("Inferred from values.yaml (spec.schema.openKeys opens it).".to_owned());
            schema[INFERRED] = json!(match (rule, values) {
                (Rule::ClosedMap, _) =>
                    "unknown keys refused: inferred from the keys values.yaml gives".to_owned(),
                (Rule::TypedList, _) =>
                    "inferred from the elements of the values.yaml list".to_owned(),
                (_, [one]) => format!("inferred from values.yaml default {}", short(one)),
                _ => "inferred from values.yaml".to_owned(),
            });
        }
        if !text.is_empty() {
            schema["description"] = json!(text.join("\n\n"));
        }
        schema
    }
}

/// A scalar node: the type its values share (see [`Rule`] for the choices), or any value.
fn scalar(path: &str, values: &[&Value], refs: &References) -> (Value, Rule) {
    let key = path.rsplit('.').next().unwrap_or(path);
    let int_or_string_field = INT_OR_STRING.contains(&key);
    let all = |f: fn(&Value) -> bool| values.iter().all(|v| f(v));
    let whole = |v: &Value| v.is_i64() || v.is_u64();
    if all(Value::is_boolean) {
        return (json!({"type": "boolean"}), Rule::Boolean);
    }
    if all(Value::is_string) {
        if int_or_string_field {
            return (json!({"type": ["integer", "string"]}), Rule::IntOrString);
        }
        let numeric = values
            .iter()
            .any(|v| v.as_str().is_some_and(|s| s.trim().parse::<f64>().is_ok()));
        let rule = if numeric {
            Rule::NumericString
        } else {
            Rule::String
        };
        return (json!({"type": "string"}), rule);
    }
    if all(Value::is_number) {
        if !all(whole) {
            return (json!({"type": "number"}), Rule::Float);
        }
        if int_or_string_field {
            return (json!({"type": ["integer", "string"]}), Rule::IntOrString);
        }
        if refs.in_float_arithmetic(path) {
            return (json!({"type": "number"}), Rule::FloatArithmetic);
        }
        return (json!({"type": "integer"}), Rule::Integer);
    }
    if values.iter().all(|v| v.is_string() || whole(v)) {
        return (json!({"type": ["integer", "string"]}), Rule::IntOrString);
    }
    (json!({}), Rule::Mixed)
}

/// Compact JSON of a default, for messages.
fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 60 {
        let cut: String = text.chars().take(57).collect();
        format!("{cut}...")
    } else {
        text
    }
}
