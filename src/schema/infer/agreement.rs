//! How far an inferred schema agrees with a declared one: on every field both give a type, is
//! it the same type? What measures the inference against charts that ship both.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray,
};

/// The fields two structural schemas both type, and where their types differ.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Agreement {
    /// Fields both schemas give a type.
    pub compared: usize,
    /// Of those, fields of the same type.
    pub agreed: usize,
    /// Of those, `integer` fields the declared schema calls `number`: inference's choice for
    /// whole-number defaults (see the integer rule of the inference report).
    pub integer_for_number: usize,
    /// `path: declared → inferred` for each other field whose types differ.
    pub differences: Vec<String>,
}

impl Agreement {
    /// Agreed fields per compared field (1 when none were compared).
    pub fn rate(&self) -> f64 {
        if self.compared == 0 {
            1.0
        } else {
            self.agreed as f64 / self.compared as f64
        }
    }

    /// Fields of the same type, or `integer` for `number`, per compared field.
    pub fn rate_with_integers(&self) -> f64 {
        if self.compared == 0 {
            1.0
        } else {
            (self.agreed + self.integer_for_number) as f64 / self.compared as f64
        }
    }

    /// Adds `other`'s counts (not its differences) to these.
    pub fn add(&mut self, other: &Agreement) {
        self.compared += other.compared;
        self.agreed += other.agreed;
        self.integer_for_number += other.integer_for_number;
    }
}

/// Compares `inferred` with `declared` (both structural, as the converter makes them) on every
/// field both describe, from `path` down through properties and list items.
pub fn agreement(declared: &JSONSchemaProps, inferred: &JSONSchemaProps, path: &str) -> Agreement {
    let mut out = Agreement::default();
    compare(declared, inferred, path, &mut out);
    out
}

fn compare(
    declared: &JSONSchemaProps,
    inferred: &JSONSchemaProps,
    path: &str,
    out: &mut Agreement,
) {
    if let (Some(d), Some(i)) = (type_of(declared), type_of(inferred)) {
        out.compared += 1;
        if d == i {
            out.agreed += 1;
        } else if (d, i) == ("number", "integer") {
            out.integer_for_number += 1;
        } else {
            out.differences.push(format!("{path}: {d} → {i}"));
        }
    }
    if let (Some(d), Some(i)) = (&declared.properties, &inferred.properties) {
        for (key, d_child) in d {
            if let Some(i_child) = i.get(key) {
                compare(d_child, i_child, &format!("{path}.{key}"), out);
            }
        }
    }
    if let (Some(JSONSchemaPropsOrArray::Schema(d)), Some(JSONSchemaPropsOrArray::Schema(i))) =
        (&declared.items, &inferred.items)
    {
        compare(d, i, &format!("{path}[*]"), out);
    }
}

/// A field's type as a word: its `type`, or `int-or-string`; `None` for a field of any value.
fn type_of(schema: &JSONSchemaProps) -> Option<&str> {
    if schema.x_kubernetes_int_or_string == Some(true) {
        return Some("int-or-string");
    }
    schema.type_.as_deref()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn props(value: serde_json::Value) -> JSONSchemaProps {
        serde_json::from_value(value).expect("schema")
    }

    #[test]
    fn fields_typed_by_both_are_compared() {
        let declared = props(json!({"type": "object", "properties": {
            "a": {"type": "integer"}, "b": {"type": "number"}, "c": {"x-kubernetes-int-or-string": true},
            "d": {"type": "array", "items": {"type": "string"}}
        }}));
        let inferred = props(json!({"type": "object", "properties": {
            "a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "string"}, "e": {"type": "string"},
            "d": {"type": "array", "items": {"type": "string"}}
        }}));
        let a = agreement(&declared, &inferred, "spec");
        assert_eq!((a.compared, a.agreed, a.integer_for_number), (6, 4, 1));
        assert_eq!(a.differences, ["spec.c: int-or-string → string"]);
    }
}
