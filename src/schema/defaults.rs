//! Does a default validate against the converted node? The apiserver refuses a CRD whose
//! defaults fail their own schema, or would be pruned, so only such defaults are kept.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use serde_json::Value;

/// Whether `value` passes the structural checks the apiserver runs on a default: type,
/// nullability, enum, pattern, bounds, lengths, required keys, and no key that would be pruned.
pub(crate) fn validates(value: &Value, s: &JSONSchemaProps) -> bool {
    if value.is_null() {
        return s.nullable == Some(true);
    }
    if let Some(e) = &s.enum_
        && !e.iter().any(|j| &j.0 == value)
    {
        return false;
    }
    if s.x_kubernetes_int_or_string == Some(true) {
        return (value.is_string() || is_integer(value)) && scalar_ok(value, s);
    }
    match s.type_.as_deref() {
        None => true,
        Some("string") => value.is_string() && scalar_ok(value, s),
        Some("integer") => is_integer(value) && scalar_ok(value, s),
        Some("number") => value.is_number() && scalar_ok(value, s),
        Some("boolean") => value.is_boolean(),
        Some("array") => {
            let Some(items) = value.as_array() else {
                return false;
            };
            let len = items.len() as i64;
            if s.min_items.is_some_and(|m| len < m) || s.max_items.is_some_and(|m| len > m) {
                return false;
            }
            match &s.items {
                Some(JSONSchemaPropsOrArray::Schema(item)) => {
                    items.iter().all(|v| validates(v, item))
                }
                _ => true,
            }
        }
        Some("object") => {
            let Some(map) = value.as_object() else {
                return false;
            };
            let len = map.len() as i64;
            if s.min_properties.is_some_and(|m| len < m)
                || s.max_properties.is_some_and(|m| len > m)
            {
                return false;
            }
            if let Some(required) = &s.required
                && !required.iter().all(|r| map.contains_key(r))
            {
                return false;
            }
            let preserve = s.x_kubernetes_preserve_unknown_fields == Some(true);
            map.iter().all(|(k, v)| {
                if let Some(p) = s.properties.as_ref().and_then(|p| p.get(k)) {
                    return validates(v, p);
                }
                match &s.additional_properties {
                    Some(JSONSchemaPropsOrBool::Schema(a)) => validates(v, a),
                    Some(JSONSchemaPropsOrBool::Bool(true)) => true,
                    _ => preserve,
                }
            })
        }
        Some(_) => false,
    }
}

fn is_integer(v: &Value) -> bool {
    v.is_i64() || v.is_u64()
}

fn scalar_ok(value: &Value, s: &JSONSchemaProps) -> bool {
    if let Some(text) = value.as_str() {
        let len = text.chars().count() as i64;
        if s.min_length.is_some_and(|m| len < m) || s.max_length.is_some_and(|m| len > m) {
            return false;
        }
        if let Some(p) = &s.pattern {
            match regex::Regex::new(p) {
                Ok(re) if re.is_match(text) => {}
                _ => return false,
            }
        }
    }
    if let Some(n) = value.as_f64() {
        let below = |m: f64, ex: Option<bool>| if ex == Some(true) { n <= m } else { n < m };
        let above = |m: f64, ex: Option<bool>| if ex == Some(true) { n >= m } else { n > m };
        if s.minimum.is_some_and(|m| below(m, s.exclusive_minimum))
            || s.maximum.is_some_and(|m| above(m, s.exclusive_maximum))
        {
            return false;
        }
        if let Some(step) = s.multiple_of
            && (n / step).fract().abs() > 1e-9
        {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(v: Value) -> JSONSchemaProps {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn defaults_must_have_the_node_type() {
        let s = schema(json!({"type": "array", "items": {"type": "string"}}));
        assert!(validates(&json!(["a"]), &s));
        assert!(!validates(&json!("[]"), &s));
    }

    #[test]
    fn defaults_must_not_carry_pruned_keys() {
        let s = schema(json!({"type": "object", "properties": {"a": {"type": "string"}}}));
        assert!(validates(&json!({"a": "x"}), &s));
        assert!(!validates(&json!({"b": "x"}), &s));
        let open = schema(
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "x-kubernetes-preserve-unknown-fields": true}),
        );
        assert!(validates(&json!({"b": "x"}), &open));
    }

    #[test]
    fn defaults_respect_enum_pattern_and_bounds() {
        let s = schema(json!({"type": "string", "enum": ["a", "b"]}));
        assert!(!validates(&json!(""), &s));
        let s = schema(json!({"type": "string", "pattern": "^x+$"}));
        assert!(!validates(&json!("y"), &s));
        let s = schema(json!({"type": "integer", "minimum": 1.0, "exclusiveMinimum": true}));
        assert!(!validates(&json!(1), &s));
        assert!(validates(&json!(2), &s));
    }
}
