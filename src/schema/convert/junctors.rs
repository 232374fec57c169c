//! `anyOf` / `oneOf` folding: a CRD cannot carry structure inside junctors, so the branches
//! become one node that accepts what any branch accepts, as closely as a structural schema can
//! say it (nullable, int-or-string, one enum, a union of properties), and a warning otherwise.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{ANY, Converter, NULLABLE, infer_types, normalize_types};
use crate::schema::merge::{flatten, merge, type_list};

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
        let Branches {
            nullable,
            mut typed,
            untyped,
        } = self.sort_branches(branches, path);
        if typed.is_empty() {
            return self.union_without_types(junctor, nullable, untyped, path);
        }
        let out = if untyped > 0 {
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
        if nullable { with_null(out) } else { out }
    }

    /// Sorts the branches by what they accept, folding the junctors inside each first.
    fn sort_branches(&mut self, branches: Vec<Value>, path: &str) -> Branches {
        let mut sorted = Branches::default();
        for branch in branches {
            match branch {
                Value::Object(b) => {
                    let b = flatten(&b, path, self.warnings);
                    self.sort_branch(b, path, &mut sorted);
                }
                Value::Bool(true) => sorted.untyped += 1,
                _ => {}
            }
        }
        sorted
    }

    /// Adds one flattened branch to `sorted`.
    fn sort_branch(&mut self, b: Map<String, Value>, path: &str, sorted: &mut Branches) {
        let mut b = self.absorb_junctors(b, path);
        self.const_to_enum(&mut b, path);
        if is_null_only(&b) {
            sorted.nullable = true;
            return;
        }
        let declared = type_list(b.get("type"));
        if declared
            .as_ref()
            .is_some_and(|t| t.iter().any(|x| x == "null"))
            || b.get(NULLABLE).is_some()
        {
            sorted.nullable = true;
        }
        let types: Vec<String> = match declared {
            Some(t) => normalize_types(t.into_iter().filter(|x| x != "null").collect()),
            None if b.get(ANY).is_some() => Vec::new(),
            None => infer_types(&b),
        };
        if types.is_empty() {
            sorted.untyped += 1;
        } else {
            sorted.typed.push((types, b));
        }
    }

    /// The union when no branch has a type: constraints alone, or null alone.
    fn union_without_types(
        &mut self,
        junctor: &str,
        nullable: bool,
        untyped: usize,
        path: &str,
    ) -> Map<String, Value> {
        if untyped > 0 {
            self.warn(
                path,
                junctor,
                "branches that only add constraints were dropped (still checked before install)",
            );
            return Map::new();
        }
        // Only null branches: the node is null, which a structural schema cannot say alone.
        if nullable {
            Map::from_iter([("type".to_owned(), Value::String("null".to_owned()))])
        } else {
            Map::new()
        }
    }

    /// The union of two or more typed branches, by the types they accept together.
    fn union_typed(&mut self, junctor: &str, typed: Vec<Typed>, path: &str) -> Map<String, Value> {
        let all = all_types(&typed);
        let single_typed = typed.iter().all(|(t, _)| t.len() == 1);
        match all.as_slice() {
            [t] if t == "object" => self.union_objects(junctor, &typed, path),
            [t] if t == "array" => self.union_arrays(junctor, &typed, path),
            _ if single_typed && all.iter().all(|t| is_scalar(t)) && disjoint(&typed) => {
                self.union_disjoint_scalars(junctor, &typed, &all, path)
            }
            [t] if is_scalar(t) => self.union_same_scalar(junctor, &typed, t, path),
            _ => {
                self.warn(
                    path,
                    junctor,
                    format!(
                        "branches of types {} cannot be expressed together; any value is accepted",
                        all.join(", ")
                    ),
                );
                Map::from_iter([(ANY.to_owned(), Value::Bool(true))])
            }
        }
    }

    /// Object branches: one object with every branch's properties, closed only when every
    /// branch is, requiring only what every branch requires.
    fn union_objects(&mut self, junctor: &str, typed: &[Typed], path: &str) -> Map<String, Value> {
        let properties = united_properties(junctor, typed);
        let closed = typed
            .iter()
            .all(|(_, b)| b.get("additionalProperties") == Some(&Value::Bool(false)));
        let required = required_by_all(typed);
        let mut out = Map::new();
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
        out
    }

    /// Array branches: one array whose items may match any branch's items.
    fn union_arrays(&mut self, junctor: &str, typed: &[Typed], path: &str) -> Map<String, Value> {
        let mut items: Vec<Value> = Vec::new();
        for (_, b) in typed {
            let s = b.get("items").cloned().unwrap_or(Value::Bool(true));
            if !items.contains(&s) {
                items.push(s);
            }
        }
        let mut out = Map::new();
        out.insert("type".to_owned(), Value::String("array".to_owned()));
        out.insert("items".to_owned(), one_or_junctor(junctor, items));
        self.warn(
            path,
            junctor,
            "array branches merged into one array whose items may match any branch",
        );
        out
    }

    /// Branches of different scalar types: every keyword applies to one type only, so keeping
    /// all of them is exact (except an enum that only some branches set).
    fn union_disjoint_scalars(
        &mut self,
        junctor: &str,
        typed: &[Typed],
        all: &[String],
        path: &str,
    ) -> Map<String, Value> {
        let mut out = Map::new();
        for (_, b) in typed {
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
        self.keep_common_enum(&mut out, junctor, typed, path);
        out
    }

    /// Branches of one scalar type: the type and a common enum; other constraints are dropped.
    fn union_same_scalar(
        &mut self,
        junctor: &str,
        typed: &[Typed],
        t: &str,
        path: &str,
    ) -> Map<String, Value> {
        let mut out = Map::new();
        out.insert("type".to_owned(), Value::String(t.to_owned()));
        let extra = typed.iter().any(|(_, b)| {
            b.keys()
                .any(|k| !matches!(k.as_str(), "type" | "enum" | "description" | "title"))
        });
        self.keep_common_enum(&mut out, junctor, typed, path);
        if extra {
            self.warn(
                path,
                junctor,
                format!("constraints of the {t} branches dropped (still checked before install)"),
            );
        }
        out
    }

    /// Sets the enum of every branch's values when every branch has an enum; warns when only
    /// some do.
    fn keep_common_enum(
        &mut self,
        out: &mut Map<String, Value>,
        junctor: &str,
        typed: &[Typed],
        path: &str,
    ) {
        match enum_union(typed) {
            Some(e) => {
                out.insert("enum".to_owned(), Value::Array(e));
            }
            None if typed.iter().any(|(_, b)| b.contains_key("enum")) => {
                self.warn(path, junctor, "an enum of only some branches was dropped");
            }
            None => {}
        }
    }
}

/// A junctor's branches, sorted by what they accept.
#[derive(Default)]
struct Branches {
    /// Some branch accepts null.
    nullable: bool,
    /// The branches with types, each with its types (null left out).
    typed: Vec<Typed>,
    /// How many branches accept any type.
    untyped: usize,
}

/// A branch's types and the branch.
type Typed = (Vec<String>, Map<String, Value>);

/// `out` also accepting null: in its type list, or marked when it has none.
fn with_null(mut out: Map<String, Value>) -> Map<String, Value> {
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
    out
}

/// Every type some branch accepts.
fn all_types(typed: &[Typed]) -> Vec<String> {
    let mut all: Vec<String> = Vec::new();
    for (types, _) in typed {
        for t in types {
            if !all.contains(t) {
                all.push(t.clone());
            }
        }
    }
    normalize_types(all)
}

/// The values of every branch's enum, when every branch has one.
fn enum_union(typed: &[Typed]) -> Option<Vec<Value>> {
    let lists = typed
        .iter()
        .map(|(_, b)| b.get("enum").and_then(Value::as_array).cloned())
        .collect::<Option<Vec<_>>>()?;
    let mut seen = Vec::new();
    for v in lists.into_iter().flatten() {
        if !seen.contains(&v) {
            seen.push(v);
        }
    }
    Some(seen)
}

/// Every branch's properties, in order of first appearance; a property that branches declare
/// differently becomes a junctor of its distinct schemas.
fn united_properties(junctor: &str, typed: &[Typed]) -> Map<String, Value> {
    let mut names: Vec<String> = Vec::new();
    let mut per_name: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for (_, b) in typed {
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
        let list = per_name.remove(&name).unwrap_or_default();
        properties.insert(name, one_or_junctor(junctor, list));
    }
    properties
}

/// The names the first branch requires that every other branch requires too.
fn required_by_all(typed: &[Typed]) -> Vec<Value> {
    typed
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
        .collect()
}

/// The one schema of `schemas`, or a junctor of all of them (folded again when converted).
fn one_or_junctor(junctor: &str, mut schemas: Vec<Value>) -> Value {
    if schemas.len() == 1 {
        schemas.remove(0)
    } else {
        Value::Object(Map::from_iter([(
            junctor.to_owned(),
            Value::Array(schemas),
        )]))
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
fn disjoint(typed: &[Typed]) -> bool {
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
