//! The typed shapes of a converted node: scalars (with enum, pattern, bounds, format), objects
//! (properties, maps, preserved unknown fields, `required`) and arrays (items, sets).

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSON, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use serde_json::{Map, Value};

use super::{Converter, any_value};
use crate::schema::keywords::{format_known, re2_compatible};
use crate::schema::warning::child;

impl Converter<'_> {
    /// A string, number, integer, boolean or int-or-string node (`ty` is `None` for the latter).
    pub(crate) fn scalar(
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

    /// An object node: its declared properties, what it does with other keys, and the keys it
    /// requires.
    pub(crate) fn object(
        &mut self,
        m: &Map<String, Value>,
        path: &str,
        values: Option<&Value>,
    ) -> JSONSchemaProps {
        let mut p = JSONSchemaProps {
            type_: Some("object".to_owned()),
            ..Default::default()
        };
        let properties = self.properties(m, path, values);
        let mut preserve = false;
        match self.other_keys(m, path, !properties.is_empty()) {
            OtherKeys::Validated(s) => {
                p.additional_properties = Some(JSONSchemaPropsOrBool::Schema(s));
            }
            OtherKeys::Kept => preserve = true,
            OtherKeys::Pruned => {}
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
            p.required = self.required(required, &properties, path, values);
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

    /// The converted declared properties; `values` is the object's value in values.yaml.
    fn properties(
        &mut self,
        m: &Map<String, Value>,
        path: &str,
        values: Option<&Value>,
    ) -> BTreeMap<String, JSONSchemaProps> {
        let mut properties = BTreeMap::new();
        if let Some(Value::Object(declared)) = m.get("properties") {
            for (name, s) in declared {
                let v = values.and_then(|v| v.get(name));
                properties.insert(name.clone(), self.convert(s, &child(path, name), v));
            }
        }
        properties
    }

    /// What the object does with keys other than its declared properties.
    fn other_keys(
        &mut self,
        m: &Map<String, Value>,
        path: &str,
        has_properties: bool,
    ) -> OtherKeys {
        let additional = m.get("additionalProperties");
        let pattern_props = m
            .get("patternProperties")
            .and_then(Value::as_object)
            .filter(|pp| !pp.is_empty());
        if has_properties {
            self.keys_beside_properties(additional, pattern_props, path)
        } else if let Some(pp) = pattern_props {
            self.pattern_keys(pp, additional, path)
        } else {
            match additional {
                Some(Value::Object(s)) if !s.is_empty() => {
                    let s = self.convert(&Value::Object(s.clone()), &format!("{path}{{*}}"), None);
                    OtherKeys::Validated(Box::new(s))
                }
                Some(Value::Bool(false)) => OtherKeys::Pruned,
                _ => OtherKeys::Kept,
            }
        }
    }

    /// Other keys next to declared properties: a structural schema cannot validate them by a
    /// schema there, so they are pruned only when the chart forbids them.
    fn keys_beside_properties(
        &mut self,
        additional: Option<&Value>,
        pattern_props: Option<&Map<String, Value>>,
        path: &str,
    ) -> OtherKeys {
        let closed = additional == Some(&Value::Bool(false)) && pattern_props.is_none();
        if closed {
            return OtherKeys::Pruned;
        }
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
        OtherKeys::Kept
    }

    /// Keys matched by `patternProperties` in an object without declared properties.
    fn pattern_keys(
        &mut self,
        pp: &Map<String, Value>,
        additional: Option<&Value>,
        path: &str,
    ) -> OtherKeys {
        let mut distinct: Vec<&Value> = Vec::new();
        for s in pp.values() {
            if !distinct.contains(&s) {
                distinct.push(s);
            }
        }
        let keys: Vec<&str> = pp.keys().map(String::as_str).collect();
        // Validating every value by the pattern's schema is exact only when no other key
        // is allowed anyway, or when the pattern matches every key; otherwise a key that
        // misses the pattern (free in the chart's schema) would be rejected.
        let others_forbidden = additional == Some(&Value::Bool(false));
        let universal = keys.iter().all(|k| matches_every_key(k));
        let extra_schema = additional.is_some_and(|a| a.as_object().is_some_and(|o| !o.is_empty()));
        if distinct.len() == 1 && !extra_schema && (others_forbidden || universal) {
            let s = self.convert(distinct[0], &format!("{path}{{*}}"), None);
            if !universal {
                self.warn(
                    path,
                    "patternProperties",
                    format!(
                        "key pattern {} not enforced; every value is validated by its schema",
                        keys.join(" | ")
                    ),
                );
            }
            OtherKeys::Validated(Box::new(s))
        } else {
            self.warn(
                path,
                "patternProperties",
                format!(
                    "key pattern {} cannot be expressed; values kept unvalidated",
                    keys.join(" | ")
                ),
            );
            OtherKeys::Kept
        }
    }

    /// The declared keys the CRD can require: sorted, without those the chart's values.yaml
    /// supplies; `None` when none is left.
    fn required(
        &mut self,
        required: &[Value],
        properties: &BTreeMap<String, JSONSchemaProps>,
        path: &str,
        values: Option<&Value>,
    ) -> Option<Vec<String>> {
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
        (!keep.is_empty()).then_some(keep)
    }

    pub(crate) fn array(&mut self, m: &Map<String, Value>, path: &str) -> JSONSchemaProps {
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
}

/// What an object does with keys other than its declared properties.
enum OtherKeys {
    /// Every value is validated by this schema.
    Validated(Box<JSONSchemaProps>),
    /// They are kept unvalidated.
    Kept,
    /// They are pruned.
    Pruned,
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

/// Whether a key pattern matches any key (`.*`, `^.*$`, `.+`, …).
fn matches_every_key(pattern: &str) -> bool {
    let core = pattern.trim_start_matches('^').trim_end_matches('$');
    matches!(core, "" | ".*" | ".+" | "(.*)" | "(.+)")
}
