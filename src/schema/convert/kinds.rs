//! What kind of value a node accepts: its declared types, or types guessed from its keywords
//! when it declares none, settled into one kind a structural schema can express.

use serde_json::{Map, Value};

use super::{ANY, Converter, NULLABLE};
use crate::schema::keywords::format_known;
use crate::schema::merge::type_list;

/// What kind of value a node accepts, once types are settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Any JSON value: untyped, unknown fields preserved.
    Any,
    /// An integer or a string (`x-kubernetes-int-or-string`).
    IntOrString,
    /// `string`, `integer`, `number` or `boolean`.
    Scalar(&'static str),
    /// `object`.
    Object,
    /// `array`.
    Array,
}

impl Converter<'_> {
    /// Settles the node's kind and whether null is allowed.
    ///
    /// A type guessed from keywords (not declared) is dropped when the chart's own value at
    /// this path does not have it: the chart's schema accepts that value, so must the CRD.
    pub(crate) fn kind(
        &mut self,
        m: &Map<String, Value>,
        path: &str,
        values: Option<&Value>,
    ) -> (Kind, bool) {
        let mut nullable = null_allowed(m);
        if m.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
            return (Kind::IntOrString, nullable);
        }
        let types = match type_list(m.get("type")) {
            Some(declared) => {
                if declared.iter().any(|t| t == "null") {
                    nullable = true;
                }
                match self.declared_types(declared, path) {
                    Some(types) => types,
                    None => return (Kind::Any, true),
                }
            }
            None if marked_any(m) => return (Kind::Any, true),
            None => fitting_types(infer_types(m), values),
        };
        let kind = self.kind_of(&types, path);
        (kind, nullable || kind == Kind::Any)
    }

    /// The declared types other than null, normalized; `None`, with a warning, when null is
    /// the only one.
    fn declared_types(&mut self, declared: Vec<String>, path: &str) -> Option<Vec<String>> {
        let mut types = Vec::new();
        for t in declared {
            match t.as_str() {
                "null" => {}
                "string" | "integer" | "number" | "boolean" | "object" | "array" => types.push(t),
                other => self.warn(path, "type", format!("unknown type {other:?} ignored")),
            }
        }
        if types.is_empty() {
            self.warn(
                path,
                "type",
                "type null alone cannot be expressed; any value is accepted",
            );
            return None;
        }
        Some(normalize_types(types))
    }

    /// The kind of a node accepting values of `types` (none: any value).
    fn kind_of(&mut self, types: &[String], path: &str) -> Kind {
        match types {
            [] => Kind::Any,
            [t] => match t.as_str() {
                "object" => Kind::Object,
                "array" => Kind::Array,
                "string" => Kind::Scalar("string"),
                "integer" => Kind::Scalar("integer"),
                "number" => Kind::Scalar("number"),
                _ => Kind::Scalar("boolean"),
            },
            [a, b] if (a == "integer" && b == "string") || (a == "string" && b == "integer") => {
                Kind::IntOrString
            }
            _ => {
                self.warn(
                    path,
                    "type",
                    format!(
                        "values of types {} cannot be expressed together; any value is accepted",
                        types.join(", ")
                    ),
                );
                Kind::Any
            }
        }
    }
}

/// Whether the node allows null before its types are read. A null in `enum` allows null only
/// when no `type` forbids it.
fn null_allowed(m: &Map<String, Value>) -> bool {
    m.get(NULLABLE) == Some(&Value::Bool(true))
        || (!m.contains_key("type")
            && m.get("enum")
                .and_then(Value::as_array)
                .is_some_and(|e| e.iter().any(Value::is_null)))
}

/// Whether an untyped node is marked to accept any value: by junctor folding, or by
/// preserving unknown fields without declaring properties.
fn marked_any(m: &Map<String, Value>) -> bool {
    m.get(ANY) == Some(&Value::Bool(true))
        || (m.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
            && !m.contains_key("properties"))
}

/// The guessed `types`, or none when the chart's own value has none of them.
fn fitting_types(types: Vec<String>, values: Option<&Value>) -> Vec<String> {
    let fits = |t: &String| match values {
        None | Some(Value::Null) => true,
        Some(Value::Object(_)) => t == "object",
        Some(Value::Array(_)) => t == "array",
        Some(Value::String(_)) => t == "string",
        Some(Value::Bool(_)) => t == "boolean",
        Some(Value::Number(n)) => t == "number" || (t == "integer" && (n.is_i64() || n.is_u64())),
    };
    if types.iter().any(fits) {
        types
    } else {
        Vec::new()
    }
}

/// `integer` and `number` together are just `number`.
pub(crate) fn normalize_types(mut types: Vec<String>) -> Vec<String> {
    if types.iter().any(|t| t == "number") {
        types.retain(|t| t != "integer");
    }
    let mut out: Vec<String> = Vec::new();
    for t in types {
        if !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

/// Guesses the types a node without `type` is meant for, from the keywords it uses.
pub(crate) fn infer_types(m: &Map<String, Value>) -> Vec<String> {
    let has = |keys: &[&str]| keys.iter().any(|k| m.contains_key(*k));
    let mut types: Vec<String> = Vec::new();
    let mut add = |t: &str| {
        if !types.iter().any(|x| x == t) {
            types.push(t.to_owned());
        }
    };
    if has(&[
        "properties",
        "additionalProperties",
        "patternProperties",
        "required",
        "minProperties",
        "maxProperties",
    ]) {
        add("object");
    }
    if has(&[
        "items",
        "prefixItems",
        "minItems",
        "maxItems",
        "uniqueItems",
    ]) {
        add("array");
    }
    if has(&["pattern", "minLength", "maxLength"]) {
        add("string");
    }
    if let Some(f) = m.get("format").and_then(Value::as_str) {
        for t in ["string", "integer", "number"] {
            if format_known(f, t) {
                add(t);
            }
        }
    }
    if has(&[
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
    ]) {
        add("number");
    }
    if let Some(values) = m.get("enum").and_then(Value::as_array) {
        for v in values {
            match v {
                Value::String(_) => add("string"),
                Value::Bool(_) => add("boolean"),
                Value::Number(n) if n.is_i64() || n.is_u64() => add("integer"),
                Value::Number(_) => add("number"),
                Value::Object(_) => add("object"),
                Value::Array(_) => add("array"),
                Value::Null => {}
            }
        }
    }
    normalize_types(types)
}
