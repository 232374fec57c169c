//! One JSON Schema node (references already inlined) → one structural `JSONSchemaProps` node.
//!
//! The rules are those of DESIGN.md "Schema conversion": every object that allows extra keys
//! keeps its declared properties and preserves unknown fields; junctors are folded into the
//! node; anything the apiserver cannot express is dropped with a warning, never silently.

mod junctors;
mod kinds;
mod shapes;

pub(crate) use kinds::{infer_types, normalize_types};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{JSON, JSONSchemaProps};
use serde_json::{Map, Value};

use super::defaults;
use super::merge::flatten;
use super::warning::Warning;
use kinds::Kind;

/// Marks a node that must accept any value (set by junctor folding).
pub(crate) const ANY: &str = "x-compositor-any";
/// Marks an untyped node that allows null.
pub(crate) const NULLABLE: &str = "x-compositor-nullable";
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
        let (kind, mut nullable) = self.kind(&m, path, values);
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

    pub(crate) fn warn(&mut self, path: &str, keyword: &str, action: impl Into<String>) {
        self.warnings.push(Warning::new(path, keyword, action));
    }

    pub(crate) fn const_to_enum(&mut self, m: &mut Map<String, Value>, path: &str) {
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
