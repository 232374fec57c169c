//! One JSON Schema node (references already inlined) → one structural `JSONSchemaProps` node.
//!
//! The rules are those of DESIGN.md "Schema conversion": every object that allows extra keys
//! keeps its declared properties and preserves unknown fields; junctors are folded into the
//! node; anything the apiserver cannot express is dropped with a warning, never silently.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSON, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use serde_json::{Map, Value};

use super::defaults;
use super::keywords::{format_known, re2_compatible};
use super::merge::{flatten, merge, type_list};
use super::warning::{Warning, child};

/// Marks a node that must accept any value (set by junctor folding).
const ANY: &str = "x-compositor-any";
/// Marks an untyped node that allows null.
const NULLABLE: &str = "x-compositor-nullable";
/// Marks the values key of a subchart: it must survive pruning whatever its schema says.
pub(crate) const SUBCHART: &str = "x-compositor-subchart";

/// Keywords with validation meaning that a structural schema cannot carry.
const UNSUPPORTED: &[&str] = &[
    "not",
    "if",
    "then",
    "else",
    "dependencies",
    "dependentSchemas",
    "dependentRequired",
    "propertyNames",
    "contains",
    "minContains",
    "maxContains",
    "unevaluatedProperties",
    "unevaluatedItems",
    "$recursiveRef",
    "$dynamicRef",
    "x-kubernetes-validations",
    "x-kubernetes-embedded-resource",
];

/// What kind of value a node accepts, once types are settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
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

/// Deepest value nesting converted; below it a field accepts any value. Keeps a pathological
/// schema from exhausting the stack of the thread converting it.
const MAX_DEPTH: usize = 200;

/// Converts nodes and collects the warnings of every lossy step.
pub(crate) struct Converter<'w> {
    pub(crate) warnings: &'w mut Vec<Warning>,
    pub(crate) apply_defaults: bool,
    pub(crate) depth: usize,
}

impl Converter<'_> {
    /// Converts `schema`, the node for the value at `path`; `values` is the chart's values.yaml
    /// at that path (for `required` and for the default shown in descriptions).
    pub(crate) fn convert(
        &mut self,
        schema: &Value,
        path: &str,
        values: Option<&Value>,
    ) -> JSONSchemaProps {
        if self.depth >= MAX_DEPTH {
            self.warn(
                path,
                "schema",
                "nested too deeply; any value is accepted below this field",
            );
            return any_value(None);
        }
        self.depth += 1;
        let props = self.convert_node(schema, path, values);
        self.depth -= 1;
        props
    }

    fn convert_node(
        &mut self,
        schema: &Value,
        path: &str,
        values: Option<&Value>,
    ) -> JSONSchemaProps {
        let map = match schema {
            Value::Object(m) => flatten(m, path, self.warnings),
            Value::Bool(true) => return any_value(None),
            Value::Bool(false) => {
                self.warn(
                    path,
                    "false",
                    "a schema that allows no value cannot be expressed; any value is accepted",
                );
                return any_value(None);
            }
            _ => {
                self.warn(path, "schema", "not a schema object; any value is accepted");
                return any_value(None);
            }
        };
        let mut m = self.absorb_junctors(map, path);
        self.const_to_enum(&mut m, path);
        for key in UNSUPPORTED {
            if m.contains_key(*key) {
                self.warn(
                    path,
                    key,
                    "not expressible in a CRD schema; dropped (still checked before install)",
                );
            }
        }
        let (kind, mut nullable) = self.kind(&m, path);
        if values.is_some_and(Value::is_null) {
            // The chart itself sets null here; a user must be able to keep or set it.
            nullable = true;
        }
        let mut props = match kind {
            Kind::Any => {
                self.warn_dropped_validations(&m, path);
                any_value(None)
            }
            Kind::IntOrString => self.scalar(&m, path, None, &mut nullable),
            Kind::Scalar(t) => self.scalar(&m, path, Some(t), &mut nullable),
            Kind::Object => self.object(&m, path, values),
            Kind::Array => self.array(&m, path),
        };
        if nullable && kind != Kind::Any {
            props.nullable = Some(true);
        }
        props.title = m.get("title").and_then(Value::as_str).map(str::to_owned);
        props.description = describe(&m, &props, values);
        if self.apply_defaults {
            self.keep_default(&m, &mut props, kind, path);
        }
        if m.get(SUBCHART) == Some(&Value::Bool(true)) {
            self.subchart_survives(&mut props, path);
        }
        props
    }

    fn warn(&mut self, path: &str, keyword: &str, action: impl Into<String>) {
        self.warnings.push(Warning::new(path, keyword, action));
    }

    /// Folds `anyOf` and `oneOf` into the node (they cannot carry structure in a CRD).
    fn absorb_junctors(&mut self, mut m: Map<String, Value>, path: &str) -> Map<String, Value> {
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

    fn const_to_enum(&mut self, m: &mut Map<String, Value>, path: &str) {
        let Some(c) = m.remove("const") else { return };
        if c.is_object() || c.is_array() {
            self.warn(
                path,
                "const",
                "a constant object or list cannot be expressed; dropped",
            );
            return;
        }
        let list = match m.get("enum").and_then(Value::as_array) {
            Some(e) if e.contains(&c) => vec![c],
            Some(_) => {
                self.warn(path, "const", "const is not in enum; kept const");
                vec![c]
            }
            None => vec![c],
        };
        m.insert("enum".to_owned(), Value::Array(list));
    }

    /// Settles the node's kind and whether null is allowed.
    fn kind(&mut self, m: &Map<String, Value>, path: &str) -> (Kind, bool) {
        let mut nullable = m.get(NULLABLE) == Some(&Value::Bool(true))
            || m.get("enum")
                .and_then(Value::as_array)
                .is_some_and(|e| e.iter().any(Value::is_null));
        if m.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
            return (Kind::IntOrString, nullable);
        }
        let types = match type_list(m.get("type")) {
            Some(declared) => {
                if declared.iter().any(|t| t == "null") {
                    nullable = true;
                }
                let mut types = Vec::new();
                for t in declared {
                    match t.as_str() {
                        "null" => {}
                        "string" | "integer" | "number" | "boolean" | "object" | "array" => {
                            types.push(t)
                        }
                        other => self.warn(path, "type", format!("unknown type {other:?} ignored")),
                    }
                }
                if types.is_empty() {
                    self.warn(
                        path,
                        "type",
                        "type null alone cannot be expressed; any value is accepted",
                    );
                    return (Kind::Any, true);
                }
                normalize_types(types)
            }
            None if m.get(ANY) == Some(&Value::Bool(true)) => return (Kind::Any, true),
            None if m.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
                && !m.contains_key("properties") =>
            {
                return (Kind::Any, true);
            }
            None => infer_types(m),
        };
        let kind = match types.as_slice() {
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
        };
        (kind, nullable || kind == Kind::Any)
    }

    fn warn_dropped_validations(&mut self, m: &Map<String, Value>, path: &str) {
        let dropped: Vec<&str> = m
            .keys()
            .map(String::as_str)
            .filter(|k| {
                matches!(
                    *k,
                    "enum"
                        | "pattern"
                        | "format"
                        | "minimum"
                        | "maximum"
                        | "exclusiveMinimum"
                        | "exclusiveMaximum"
                        | "multipleOf"
                        | "minLength"
                        | "maxLength"
                        | "minItems"
                        | "maxItems"
                        | "uniqueItems"
                        | "minProperties"
                        | "maxProperties"
                        | "required"
                        | "properties"
                        | "items"
                        | "additionalProperties"
                        | "patternProperties"
                )
            })
            .collect();
        if !dropped.is_empty() {
            self.warn(
                path,
                &dropped.join(","),
                "dropped: the field accepts any value (still checked before install)",
            );
        }
    }

    /// A string, number, integer, boolean or int-or-string node (`ty` is `None` for the latter).
    fn scalar(
        &mut self,
        m: &Map<String, Value>,
        path: &str,
        ty: Option<&'static str>,
        nullable: &mut bool,
    ) -> JSONSchemaProps {
        let mut p = JSONSchemaProps::default();
        match ty {
            Some(t) => p.type_ = Some(t.to_owned()),
            None => p.x_kubernetes_int_or_string = Some(true),
        }
        let stringy = matches!(ty, None | Some("string"));
        let numeric = matches!(ty, None | Some("integer") | Some("number"));
        if let (Some(t), Some(f)) = (ty, m.get("format").and_then(Value::as_str)) {
            if format_known(f, t) {
                p.format = Some(f.to_owned());
            } else {
                self.warn(
                    path,
                    "format",
                    format!("format {f:?} is not validated by Kubernetes; dropped"),
                );
            }
        }
        if stringy {
            if let Some(pattern) = m.get("pattern").and_then(Value::as_str) {
                match re2_compatible(pattern) {
                    Ok(()) => p.pattern = Some(pattern.to_owned()),
                    Err(why) => self.warn(
                        path,
                        "pattern",
                        format!("pattern {pattern:?} is not accepted by the apiserver's regular expressions ({why}); dropped"),
                    ),
                }
            }
            p.min_length = count(m, "minLength");
            p.max_length = count(m, "maxLength");
        }
        if numeric {
            (p.minimum, p.exclusive_minimum) = bound(m, "minimum", "exclusiveMinimum", true);
            (p.maximum, p.exclusive_maximum) = bound(m, "maximum", "exclusiveMaximum", false);
            p.multiple_of = m
                .get("multipleOf")
                .and_then(Value::as_f64)
                .filter(|v| *v > 0.0);
        }
        if let Some(values) = m.get("enum").and_then(Value::as_array) {
            let fitting: Vec<Value> = values.iter().filter(|v| fits(v, ty)).cloned().collect();
            if fitting.is_empty() {
                if !values.iter().all(Value::is_null) {
                    self.warn(
                        path,
                        "enum",
                        "no enum value has the field's type; enum dropped",
                    );
                }
            } else if *nullable {
                // The apiserver checks a null against the enum and always fails it, so a field
                // that allows null cannot keep an enum; the values are kept in the description.
                self.warn(
                    path,
                    "enum",
                    "dropped because the field also allows null (listed in the description)",
                );
            } else {
                p.enum_ = Some(fitting.into_iter().map(JSON).collect());
            }
        }
        p
    }

    fn object(
        &mut self,
        m: &Map<String, Value>,
        path: &str,
        values: Option<&Value>,
    ) -> JSONSchemaProps {
        let mut p = JSONSchemaProps {
            type_: Some("object".to_owned()),
            ..Default::default()
        };
        let mut properties = BTreeMap::new();
        if let Some(Value::Object(declared)) = m.get("properties") {
            for (name, s) in declared {
                let v = values.and_then(|v| v.get(name));
                properties.insert(name.clone(), self.convert(s, &child(path, name), v));
            }
        }
        let additional = m.get("additionalProperties");
        let pattern_props = m
            .get("patternProperties")
            .and_then(Value::as_object)
            .filter(|pp| !pp.is_empty());
        let mut preserve = false;
        if !properties.is_empty() {
            let closed = additional == Some(&Value::Bool(false)) && pattern_props.is_none();
            if !closed {
                preserve = true;
                if additional.is_some_and(|a| a.as_object().is_some_and(|o| !o.is_empty())) {
                    self.warn(
                        path,
                        "additionalProperties",
                        "a schema for extra keys cannot sit next to properties; extra keys are kept unvalidated",
                    );
                }
                if pattern_props.is_some() {
                    self.warn(
                        path,
                        "patternProperties",
                        "cannot sit next to properties; matching keys are kept unvalidated",
                    );
                }
            }
        } else if let Some(pp) = pattern_props {
            let mut distinct: Vec<&Value> = Vec::new();
            for s in pp.values() {
                if !distinct.contains(&s) {
                    distinct.push(s);
                }
            }
            let extra_schema =
                additional.is_some_and(|a| a.as_object().is_some_and(|o| !o.is_empty()));
            if distinct.len() == 1 && !extra_schema {
                let keys: Vec<&str> = pp.keys().map(String::as_str).collect();
                let s = self.convert(distinct[0], &format!("{path}{{*}}"), None);
                p.additional_properties = Some(JSONSchemaPropsOrBool::Schema(Box::new(s)));
                self.warn(
                    path,
                    "patternProperties",
                    format!(
                        "key pattern {} not enforced; every value is validated by its schema",
                        keys.join(" | ")
                    ),
                );
            } else {
                preserve = true;
                self.warn(
                    path,
                    "patternProperties",
                    "several key patterns cannot be expressed; values kept unvalidated",
                );
            }
        } else {
            match additional {
                Some(Value::Object(s)) if !s.is_empty() => {
                    let s = self.convert(&Value::Object(s.clone()), &format!("{path}{{*}}"), None);
                    p.additional_properties = Some(JSONSchemaPropsOrBool::Schema(Box::new(s)));
                }
                Some(Value::Bool(false)) => {}
                _ => preserve = true,
            }
        }
        if m.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
            // The chart's author asked for it explicitly.
            preserve = true;
            p.additional_properties = None;
        }
        if let Some(Value::String(t)) = m.get("x-kubernetes-map-type")
            && matches!(t.as_str(), "atomic" | "granular")
        {
            p.x_kubernetes_map_type = Some(t.clone());
        }
        if let Some(required) = m.get("required").and_then(Value::as_array) {
            let mut keep: Vec<String> = Vec::new();
            let mut undeclared: Vec<String> = Vec::new();
            for name in required.iter().filter_map(Value::as_str) {
                if !properties.contains_key(name) {
                    undeclared.push(name.to_owned());
                } else if values.and_then(|v| v.get(name)).is_none_or(Value::is_null)
                    && !keep.iter().any(|k| k == name)
                {
                    // A key the chart's values.yaml supplies is present after Helm merges
                    // values, so requiring it again would force users to repeat a default.
                    keep.push(name.to_owned());
                }
            }
            if !undeclared.is_empty() {
                self.warn(
                    path,
                    "required",
                    format!("{} not declared in properties; not required by the CRD (still checked before install)", undeclared.join(", ")),
                );
            }
            keep.sort();
            if !keep.is_empty() {
                p.required = Some(keep);
            }
        }
        p.min_properties = count(m, "minProperties");
        p.max_properties = count(m, "maxProperties");
        if !properties.is_empty() {
            p.properties = Some(properties);
        }
        if preserve {
            p.x_kubernetes_preserve_unknown_fields = Some(true);
        }
        p
    }

    fn array(&mut self, m: &Map<String, Value>, path: &str) -> JSONSchemaProps {
        let item_path = format!("{path}[*]");
        let mut p = JSONSchemaProps {
            type_: Some("array".to_owned()),
            ..Default::default()
        };
        let tuple = m
            .get("prefixItems")
            .or_else(|| m.get("items").filter(|i| i.is_array()));
        let items = match (tuple, m.get("items")) {
            (Some(Value::Array(entries)), _) => {
                let first = entries.first();
                let same = first.is_some_and(|f| entries.iter().all(|e| e == f))
                    && m.get("items")
                        .is_none_or(|i| i.is_array() || Some(i) == first);
                if let (true, Some(f)) = (same, first) {
                    self.convert(f, &item_path, None)
                } else {
                    self.warn(path, "items", "a tuple of different item schemas cannot be expressed; items accept any value");
                    any_value(None)
                }
            }
            (_, Some(Value::Bool(false))) => {
                p.max_items = Some(0);
                any_value(None)
            }
            (_, Some(s @ Value::Object(_))) => self.convert(s, &item_path, None),
            _ => any_value(None),
        };
        if m.contains_key("additionalItems") {
            self.warn(
                path,
                "additionalItems",
                "not expressible in a CRD schema; dropped",
            );
        }
        let scalar_items = items
            .type_
            .as_deref()
            .is_some_and(|t| matches!(t, "string" | "integer" | "number" | "boolean"))
            && items.nullable != Some(true);
        let list_type = m.get("x-kubernetes-list-type").and_then(Value::as_str);
        if m.get("uniqueItems") == Some(&Value::Bool(true)) || list_type == Some("set") {
            if scalar_items {
                p.x_kubernetes_list_type = Some("set".to_owned());
            } else {
                self.warn(path, "uniqueItems", "uniqueness of non-scalar items cannot be expressed; dropped (still checked before install)");
            }
        } else if list_type == Some("atomic") {
            p.x_kubernetes_list_type = Some("atomic".to_owned());
        } else if list_type == Some("map") {
            self.warn(
                path,
                "x-kubernetes-list-type",
                "map lists need keys the chart cannot guarantee; dropped",
            );
        }
        p.min_items = count(m, "minItems");
        p.max_items = p.max_items.or_else(|| count(m, "maxItems"));
        p.items = Some(JSONSchemaPropsOrArray::Schema(Box::new(items)));
        p
    }

    /// Keeps the schema's default when it validates, and defaults parents to `{}` so that the
    /// apiserver descends into them.
    fn keep_default(
        &mut self,
        m: &Map<String, Value>,
        p: &mut JSONSchemaProps,
        kind: Kind,
        path: &str,
    ) {
        match m.get("default") {
            Some(Value::Null) | None => {
                let child_defaults = p
                    .properties
                    .as_ref()
                    .is_some_and(|props| props.values().any(|c| c.default.is_some()));
                if kind == Kind::Object && child_defaults && p.required.is_none() {
                    let empty = Value::Object(Map::new());
                    if defaults::validates(&empty, p) {
                        p.default = Some(JSON(empty));
                    }
                }
            }
            Some(d) => {
                if defaults::validates(d, p) {
                    p.default = Some(JSON(d.clone()));
                } else {
                    self.warn(
                        path,
                        "default",
                        format!(
                            "default {} does not validate against the field's schema; dropped",
                            short(d)
                        ),
                    );
                }
            }
        }
    }

    /// A subchart's values key must never be pruned: Helm hands it to the subchart.
    fn subchart_survives(&mut self, p: &mut JSONSchemaProps, path: &str) {
        if p.type_.as_deref() != Some("object")
            && p.x_kubernetes_preserve_unknown_fields == Some(true)
        {
            return;
        }
        if p.type_.as_deref() != Some("object") {
            self.warn(
                path,
                "type",
                "a subchart's values must be an object; type replaced",
            );
            *p = JSONSchemaProps {
                description: p.description.take(),
                ..any_value(Some("object"))
            };
            return;
        }
        if p.additional_properties.take().is_some() {
            self.warn(
                path,
                "additionalProperties",
                "a subchart's values keep every key; map schema dropped",
            );
        }
        p.x_kubernetes_preserve_unknown_fields = Some(true);
    }
}

/// A node that accepts any value (or any object, when `ty` is `object`) and prunes nothing.
pub(crate) fn any_value(ty: Option<&str>) -> JSONSchemaProps {
    JSONSchemaProps {
        type_: ty.map(str::to_owned),
        nullable: if ty.is_none() { Some(true) } else { None },
        x_kubernetes_preserve_unknown_fields: Some(true),
        ..Default::default()
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

/// `integer` and `number` together are just `number`.
fn normalize_types(mut types: Vec<String>) -> Vec<String> {
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
fn infer_types(m: &Map<String, Value>) -> Vec<String> {
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

/// Whether an enum value can be a value of the node.
fn fits(v: &Value, ty: Option<&str>) -> bool {
    let integer =
        |v: &Value| v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0);
    match ty {
        None => v.is_string() || integer(v),
        Some("string") => v.is_string(),
        Some("integer") => integer(v),
        Some("number") => v.is_number(),
        Some("boolean") => v.is_boolean(),
        _ => false,
    }
}

/// A non-negative count keyword (`minLength`, `maxItems`, …).
fn count(m: &Map<String, Value>, key: &str) -> Option<i64> {
    m.get(key).and_then(Value::as_i64).filter(|n| *n >= 0)
}

/// A bound and whether it is exclusive, from draft-04 (boolean) or draft-06+ (numeric)
/// exclusive keywords; with both a bound and an exclusive bound, the tighter wins.
fn bound(
    m: &Map<String, Value>,
    key: &str,
    exclusive_key: &str,
    lower: bool,
) -> (Option<f64>, Option<bool>) {
    let inclusive = m.get(key).and_then(Value::as_f64);
    match m.get(exclusive_key) {
        Some(Value::Bool(true)) if inclusive.is_some() => (inclusive, Some(true)),
        Some(Value::Number(n)) => {
            let ex = n.as_f64();
            match (inclusive, ex) {
                (Some(i), Some(e)) if (lower && i > e) || (!lower && i < e) => (Some(i), None),
                (_, Some(e)) => (Some(e), Some(true)),
                (i, None) => (i, None),
            }
        }
        _ => (inclusive, None),
    }
}

/// The node's description, with the chart's default (and an enum the node could not keep)
/// appended so that `kubectl explain` still shows them.
fn describe(m: &Map<String, Value>, p: &JSONSchemaProps, values: Option<&Value>) -> Option<String> {
    let mut text = m
        .get("description")
        .and_then(Value::as_str)
        .map(str::trim)
        .unwrap_or_default()
        .to_owned();
    let mut add = |line: String| {
        if !text.is_empty() {
            text.push_str("\n\n");
        }
        text.push_str(&line);
    };
    if p.enum_.is_none()
        && p.type_.as_deref() != Some("object")
        && let Some(values) = m.get("enum").and_then(Value::as_array)
        && !values.is_empty()
    {
        let list: Vec<String> = values.iter().map(short).collect();
        add(format!("Allowed values: {}", list.join(", ")));
    }
    let default = values.filter(|v| !v.is_null()).or_else(|| m.get("default"));
    if let Some(d) = default {
        let rendered = short(d);
        let fits_line = rendered.len() <= 100 && !rendered.contains("\\n");
        let leaf = !d.is_object();
        if fits_line && leaf {
            add(format!("Default: {rendered}"));
        }
    }
    (!text.is_empty()).then_some(text)
}

/// Compact JSON of a value, for messages.
fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 120 {
        let cut: String = s.chars().take(117).collect();
        format!("{cut}...")
    } else {
        s
    }
}
