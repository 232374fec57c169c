//! `anyOf` / `oneOf` folding: a CRD cannot carry structure inside junctors, so the branches
//! become one node that accepts what any branch accepts, as closely as a structural schema can
//! say it (nullable, int-or-string, one enum, a union of properties), and a warning otherwise.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::convert::{ANY, Converter, NULLABLE};
use super::kinds::{infer_types, normalize_types};
use super::merge::{flatten, merge, type_list};

impl Converter<'_> {
    /// Folds `anyOf` and `oneOf` into the node (they cannot carry structure in a CRD).
    pub(crate) fn absorb_junctors(
        &mut self,
        mut m: Map<String, Value>,
        path: &str,
    ) -> Map<String, Value> {
        for junctor in ["anyOf", "oneOf"] {
            if let Some(branches) = m.remove(junctor) {
                let union = self.union(junctor, branches, path);
                m = merge(m, union, path, self.warnings);
            }
        }
        m
    }

    /// The one node that accepts what any of `branches` accepts, as closely as a structural
    /// schema can say it.
    fn union(&mut self, junctor: &str, branches: Value, path: &str) -> Map<String, Value> {
        let Value::Array(branches) = branches else {
            self.warn(path, junctor, "not a list of schemas; ignored");
            return Map::new();
        };
        let mut nullable = false;
        let mut typed: Vec<(Vec<String>, Map<String, Value>)> = Vec::new();
        let mut untyped = 0usize;
        for branch in branches {
            let b = match branch {
                Value::Object(b) => flatten(&b, path, self.warnings),
                Value::Bool(true) => {
                    untyped += 1;
                    continue;
                }
                _ => continue,
            };
            let mut b = self.absorb_junctors(b, path);
            self.const_to_enum(&mut b, path);
            if is_null_only(&b) {
                nullable = true;
                continue;
            }
            let declared = type_list(b.get("type"));
            if declared
                .as_ref()
                .is_some_and(|t| t.iter().any(|x| x == "null"))
                || b.get(NULLABLE).is_some()
            {
                nullable = true;
            }
            let types: Vec<String> = match declared {
                Some(t) => normalize_types(t.into_iter().filter(|x| x != "null").collect()),
                None if b.get(ANY).is_some() => Vec::new(),
                None => infer_types(&b),
            };
            if types.is_empty() {
                untyped += 1;
            } else {
                typed.push((types, b));
            }
        }
        if typed.is_empty() {
            if untyped > 0 {
                self.warn(path, junctor, "branches that only add constraints were dropped (still checked before install)");
                return Map::new();
            }
            // Only null branches: the node is null, which a structural schema cannot say alone.
            return if nullable {
                Map::from_iter([("type".to_owned(), Value::String("null".to_owned()))])
            } else {
                Map::new()
            };
        }
        let mut out = if untyped > 0 {
            self.warn(
                path,
                junctor,
                "a branch accepts any type, so the node accepts any value",
            );
            Map::from_iter([(ANY.to_owned(), Value::Bool(true))])
        } else if typed.len() == 1 {
            typed.remove(0).1
        } else {
            self.union_typed(junctor, typed, path)
        };
        if nullable {
            match type_list(out.get("type")) {
                Some(mut t) => {
                    if !t.iter().any(|x| x == "null") {
                        t.push("null".to_owned());
                    }
                    out.insert(
                        "type".to_owned(),
                        Value::Array(t.into_iter().map(Value::String).collect()),
                    );
                }
                None => {
                    out.insert(NULLABLE.to_owned(), Value::Bool(true));
                }
            }
        }
        out
    }

    fn union_typed(
        &mut self,
        junctor: &str,
        typed: Vec<(Vec<String>, Map<String, Value>)>,
        path: &str,
    ) -> Map<String, Value> {
        let mut all: Vec<String> = Vec::new();
        for (types, _) in &typed {
            for t in types {
                if !all.contains(t) {
                    all.push(t.clone());
                }
            }
        }
        let all = normalize_types(all);
        let single_typed = typed.iter().all(|(t, _)| t.len() == 1);
        let mut out = Map::new();
        let enums: Option<Vec<Value>> = typed
            .iter()
            .map(|(_, b)| b.get("enum").and_then(Value::as_array).cloned())
            .collect::<Option<Vec<_>>>()
            .map(|lists| {
                let mut seen = Vec::new();
                for v in lists.into_iter().flatten() {
                    if !seen.contains(&v) {
                        seen.push(v);
                    }
                }
                seen
            });
        match all.as_slice() {
            [t] if t == "object" => {
                let mut names: Vec<String> = Vec::new();
                let mut per_name: BTreeMap<String, Vec<Value>> = BTreeMap::new();
                for (_, b) in &typed {
                    if let Some(Value::Object(p)) = b.get("properties") {
                        for (name, s) in p {
                            let list = per_name.entry(name.clone()).or_default();
                            if !list.contains(s) {
                                list.push(s.clone());
                            }
                            if !names.contains(name) {
                                names.push(name.clone());
                            }
                        }
                    }
                }
                let mut properties = Map::new();
                for name in names {
                    let mut list = per_name.remove(&name).unwrap_or_default();
                    let s = if list.len() == 1 {
                        list.remove(0)
                    } else {
                        Value::Object(Map::from_iter([(junctor.to_owned(), Value::Array(list))]))
                    };
                    properties.insert(name, s);
                }
                let closed = typed
                    .iter()
                    .all(|(_, b)| b.get("additionalProperties") == Some(&Value::Bool(false)));
                let required: Vec<Value> = typed
                    .first()
                    .and_then(|(_, b)| b.get("required").and_then(Value::as_array).cloned())
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|n| {
                        typed.iter().all(|(_, b)| {
                            b.get("required")
                                .and_then(Value::as_array)
                                .is_some_and(|r| r.contains(n))
                        })
                    })
                    .collect();
                out.insert("type".to_owned(), Value::String("object".to_owned()));
                if !properties.is_empty() {
                    out.insert("properties".to_owned(), Value::Object(properties));
                }
                if closed {
                    out.insert("additionalProperties".to_owned(), Value::Bool(false));
                }
                if !required.is_empty() {
                    out.insert("required".to_owned(), Value::Array(required));
                }
                self.warn(
                    path,
                    junctor,
                    "object branches merged into one object with the union of their properties",
                );
            }
            [t] if t == "array" => {
                let mut items: Vec<Value> = Vec::new();
                for (_, b) in &typed {
                    let s = b.get("items").cloned().unwrap_or(Value::Bool(true));
                    if !items.contains(&s) {
                        items.push(s);
                    }
                }
                out.insert("type".to_owned(), Value::String("array".to_owned()));
                let items = if items.len() == 1 {
                    items.remove(0)
                } else {
                    Value::Object(Map::from_iter([(junctor.to_owned(), Value::Array(items))]))
                };
                out.insert("items".to_owned(), items);
                self.warn(
                    path,
                    junctor,
                    "array branches merged into one array whose items may match any branch",
                );
            }
            _ if single_typed && all.iter().all(|t| is_scalar(t)) && disjoint(&typed) => {
                // Branches of different scalar types: every keyword applies to one type only,
                // so keeping all of them is exact (except an enum that only some branches set).
                for (_, b) in &typed {
                    for (k, v) in b {
                        if k != "type" && k != "enum" && !out.contains_key(k) {
                            out.insert(k.clone(), v.clone());
                        }
                    }
                }
                out.insert(
                    "type".to_owned(),
                    Value::Array(all.iter().cloned().map(Value::String).collect()),
                );
                match enums {
                    Some(e) => {
                        out.insert("enum".to_owned(), Value::Array(e));
                    }
                    None if typed.iter().any(|(_, b)| b.contains_key("enum")) => {
                        self.warn(path, junctor, "an enum of only some branches was dropped");
                    }
                    None => {}
                }
            }
            [t] if is_scalar(t) => {
                out.insert("type".to_owned(), Value::String(t.clone()));
                let extra = typed.iter().any(|(_, b)| {
                    b.keys()
                        .any(|k| !matches!(k.as_str(), "type" | "enum" | "description" | "title"))
                });
                match enums {
                    Some(e) => {
                        out.insert("enum".to_owned(), Value::Array(e));
                    }
                    None if typed.iter().any(|(_, b)| b.contains_key("enum")) => {
                        self.warn(path, junctor, "an enum of only some branches was dropped");
                    }
                    None => {}
                }
                if extra {
                    self.warn(
                        path,
                        junctor,
                        format!(
                            "constraints of the {t} branches dropped (still checked before install)"
                        ),
                    );
                }
            }
            _ => {
                self.warn(
                    path,
                    junctor,
                    format!(
                        "branches of types {} cannot be expressed together; any value is accepted",
                        all.join(", ")
                    ),
                );
                out.insert(ANY.to_owned(), Value::Bool(true));
            }
        }
        out
    }
}

fn is_null_only(b: &Map<String, Value>) -> bool {
    let type_null =
        type_list(b.get("type")).is_some_and(|t| !t.is_empty() && t.iter().all(|x| x == "null"));
    let enum_null = b
        .get("enum")
        .and_then(Value::as_array)
        .is_some_and(|e| !e.is_empty() && e.iter().all(Value::is_null));
    type_null || enum_null
}

fn is_scalar(t: &str) -> bool {
    matches!(t, "string" | "integer" | "number" | "boolean")
}

/// Whether no two branches share a type.
fn disjoint(typed: &[(Vec<String>, Map<String, Value>)]) -> bool {
    let mut seen: Vec<&str> = Vec::new();
    for (types, _) in typed {
        for t in types {
            if seen.contains(&t.as_str()) {
                return false;
            }
            seen.push(t);
        }
    }
    true
}
