//! `allOf` merging: several subschemas that must all hold become one node.
//!
//! The apiserver forbids structure (`type`, `properties`, …) inside `allOf`, so branches are
//! folded into their parent: types are intersected, properties united (recursively), bounds
//! tightened, `required` united, enums intersected. Where two branches disagree in a way one node
//! cannot express, the first wins and a warning says what was dropped.

use serde_json::{Map, Value};

use super::warning::Warning;

/// Merges `allOf` (recursively) into `map` and folds OpenAPI's `nullable: true` into the type
/// list, so that later steps see one node with a JSON Schema `type`.
pub(crate) fn flatten(
    map: &Map<String, Value>,
    path: &str,
    warnings: &mut Vec<Warning>,
) -> Map<String, Value> {
    let mut node = map.clone();
    let branches = node.remove("allOf");
    normalize_nullable(&mut node);
    if let Some(branches) = branches {
        let branches = match branches {
            Value::Array(items) => items,
            other => vec![other],
        };
        for branch in branches {
            match branch {
                Value::Object(b) => {
                    let b = flatten(&b, path, warnings);
                    node = merge(node, b, path, warnings);
                }
                Value::Bool(true) => {}
                _ => warnings.push(Warning::new(
                    path,
                    "allOf",
                    "a branch that is not a schema object was ignored",
                )),
            }
        }
    }
    node
}

fn normalize_nullable(node: &mut Map<String, Value>) {
    if node.get("nullable") == Some(&Value::Bool(true)) {
        node.remove("nullable");
        if let Some(mut types) = type_list(node.get("type")) {
            if !types.iter().any(|t| t == "null") {
                types.push("null".to_owned());
            }
            node.insert("type".to_owned(), types_value(types));
        } else {
            // Untyped and nullable: remember the null so inference can add it back.
            node.insert("x-compositor-nullable".to_owned(), Value::Bool(true));
        }
    } else if node.get("nullable") == Some(&Value::Bool(false)) {
        node.remove("nullable");
    }
}

/// The `type` keyword as a list, or `None` when absent or malformed.
pub(crate) fn type_list(value: Option<&Value>) -> Option<Vec<String>> {
    match value? {
        Value::String(s) => Some(vec![s.clone()]),
        Value::Array(items) => Some(
            items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
        ),
        _ => None,
    }
}

fn types_value(mut types: Vec<String>) -> Value {
    if types.len() == 1 {
        Value::String(types.remove(0))
    } else {
        Value::Array(types.into_iter().map(Value::String).collect())
    }
}

/// Intersects two type lists; `integer` is a subset of `number`.
fn intersect_types(a: &[String], b: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for t in a {
        let keep = if b.contains(t) {
            Some(t.clone())
        } else if (t == "number" && b.iter().any(|x| x == "integer"))
            || (t == "integer" && b.iter().any(|x| x == "number"))
        {
            Some("integer".to_owned())
        } else {
            None
        };
        if let Some(k) = keep
            && !out.contains(&k)
        {
            out.push(k);
        }
    }
    out
}

/// Merges two flattened schema nodes that must both hold.
pub(crate) fn merge(
    mut a: Map<String, Value>,
    b: Map<String, Value>,
    path: &str,
    warnings: &mut Vec<Warning>,
) -> Map<String, Value> {
    for (key, bv) in b {
        let Some(av) = a.remove(&key) else {
            a.insert(key, bv);
            continue;
        };
        let merged = merge_keyword(&key, av, bv, path, warnings);
        a.insert(key, merged);
    }
    a
}

/// The value of `key` when both nodes set it: `av` from the first, `bv` from the second.
fn merge_keyword(
    key: &str,
    av: Value,
    bv: Value,
    path: &str,
    warnings: &mut Vec<Warning>,
) -> Value {
    match key {
        "type" => merge_types(av, bv, path, warnings),
        "properties" | "patternProperties" => merge_properties(av, bv, path, warnings),
        "additionalProperties" | "items" => {
            let step = if key == "items" { "[*]" } else { "{*}" };
            merge_member_schemas(av, bv, &format!("{path}{step}"), warnings)
        }
        "required" => unite_required(av, bv),
        "enum" => intersect_enums(av, bv, path, warnings),
        "minimum" | "minLength" | "minItems" | "minProperties" => tighter(av, bv, true),
        "maximum" | "maxLength" | "maxItems" | "maxProperties" => tighter(av, bv, false),
        "exclusiveMinimum" | "exclusiveMaximum" => match (&av, &bv) {
            (Value::Bool(x), Value::Bool(y)) => Value::Bool(*x || *y),
            (Value::Number(_), Value::Number(_)) => tighter(av, bv, key == "exclusiveMinimum"),
            _ => av,
        },
        "uniqueItems" | "x-compositor-subchart" | "x-compositor-any" | "x-compositor-nullable" => {
            Value::Bool(av == Value::Bool(true) || bv == Value::Bool(true))
        }
        "pattern" | "format" | "const" | "multipleOf" | "anyOf" | "oneOf" | "not" => {
            if av != bv {
                warnings.push(Warning::new(
                    path,
                    &format!("allOf/{key}"),
                    format!("two branches both set {key}; kept the first"),
                ));
            }
            av
        }
        // Annotations and anything else: the first branch wins.
        _ => av,
    }
}

/// The types both allow; the first when they share none.
fn merge_types(av: Value, bv: Value, path: &str, warnings: &mut Vec<Warning>) -> Value {
    let (Some(x), Some(y)) = (type_list(Some(&av)), type_list(Some(&bv))) else {
        return av;
    };
    let both = intersect_types(&x, &y);
    if both.is_empty() {
        warnings.push(Warning::new(
            path,
            "allOf",
            format!("conflicting types {av} and {bv}; kept {av}"),
        ));
        av
    } else {
        types_value(both)
    }
}

/// Every property of either, those of both merged.
fn merge_properties(av: Value, bv: Value, path: &str, warnings: &mut Vec<Warning>) -> Value {
    match (av, bv) {
        (Value::Object(mut x), Value::Object(y)) => {
            for (name, ys) in y {
                let entry = match x.remove(&name) {
                    Some(xs) => {
                        merge_schemas(xs, ys, &super::warning::child(path, &name), warnings)
                    }
                    None => ys,
                };
                x.insert(name, entry);
            }
            Value::Object(x)
        }
        (x, _) => x,
    }
}

/// The schema of items or of map values: `false` wins, `true` yields, two schemas merge.
fn merge_member_schemas(av: Value, bv: Value, path: &str, warnings: &mut Vec<Warning>) -> Value {
    match (av, bv) {
        (Value::Bool(false), _) | (_, Value::Bool(false)) => Value::Bool(false),
        (Value::Bool(true), y) => y,
        (x, Value::Bool(true)) => x,
        (x @ Value::Object(_), y @ Value::Object(_)) => merge_schemas(x, y, path, warnings),
        (x, _) => x,
    }
}

/// The names either requires, first's first.
fn unite_required(av: Value, bv: Value) -> Value {
    let mut names: Vec<Value> = av.as_array().cloned().unwrap_or_default();
    for n in bv.as_array().cloned().unwrap_or_default() {
        if !names.contains(&n) {
            names.push(n);
        }
    }
    Value::Array(names)
}

/// The values both enums allow; the first enum when they share none.
fn intersect_enums(av: Value, bv: Value, path: &str, warnings: &mut Vec<Warning>) -> Value {
    let (x, y) = match (av, bv) {
        (Value::Array(x), Value::Array(y)) => (x, y),
        (x, _) => return x,
    };
    let both: Vec<Value> = x.iter().filter(|v| y.contains(v)).cloned().collect();
    if both.is_empty() {
        warnings.push(Warning::new(
            path,
            "allOf",
            "enums with no common value; kept the first",
        ));
        Value::Array(x)
    } else {
        Value::Array(both)
    }
}

/// Merges two subschemas that may be booleans.
fn merge_schemas(a: Value, b: Value, path: &str, warnings: &mut Vec<Warning>) -> Value {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let x = flatten(&x, path, warnings);
            let y = flatten(&y, path, warnings);
            Value::Object(merge(x, y, path, warnings))
        }
        (Value::Bool(true), y) => y,
        (x, Value::Bool(true)) => x,
        (x, _) => x,
    }
}

fn tighter(a: Value, b: Value, lower: bool) -> Value {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => {
            if (lower && y > x) || (!lower && y < x) {
                b
            } else {
                a
            }
        }
        _ => a,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn flat(v: Value) -> (Value, Vec<Warning>) {
        let mut w = Vec::new();
        let m = flatten(v.as_object().unwrap(), "spec", &mut w);
        (Value::Object(m), w)
    }

    #[test]
    fn all_of_merges_properties_required_and_bounds() {
        let (m, w) = flat(json!({
            "allOf": [
                {"type": "object", "properties": {"a": {"type": "integer", "minimum": 1}}, "required": ["a"]},
                {"properties": {"a": {"minimum": 3, "maximum": 9}, "b": {"type": "string"}}, "required": ["b"]}
            ]
        }));
        assert!(w.is_empty());
        assert_eq!(
            m,
            json!({
                "type": "object",
                "properties": {"a": {"type": "integer", "minimum": 3, "maximum": 9}, "b": {"type": "string"}},
                "required": ["a", "b"]
            })
        );
    }

    #[test]
    fn all_of_with_conflicting_types_keeps_first_and_warns() {
        let (m, w) = flat(json!({"allOf": [{"type": "string"}, {"type": "object"}]}));
        assert_eq!(m["type"], "string");
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].keyword, "allOf");
    }

    #[test]
    fn types_intersect_with_integer_inside_number() {
        let (m, _) =
            flat(json!({"type": ["number", "null"], "allOf": [{"type": ["integer", "string"]}]}));
        assert_eq!(m["type"], "integer");
    }

    #[test]
    fn nullable_becomes_null_type() {
        let (m, _) = flat(json!({"type": "string", "nullable": true}));
        assert_eq!(m["type"], json!(["string", "null"]));
    }
}
