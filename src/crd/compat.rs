//! Whether one version's schema can replace another's: compatible when the new schema accepts
//! every object the old one accepted (the same fields, added optional ones, relaxed constraints,
//! widened types). Anything else is a break, reported with the path that broke and why.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinitionVersion, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};

/// A path where the new schema refuses something the old one accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Break {
    /// Dotted path below the object, e.g. `spec.app.port`; `[]` stands for any list item and
    /// `*` for any map value.
    pub path: String,
    /// What changed, e.g. `type integer → string`.
    pub reason: String,
}

impl std::fmt::Display for Break {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.reason)
    }
}

/// Whether every object valid under `old`'s `spec` stays valid under `new`'s.
pub fn compatible(
    old: &CustomResourceDefinitionVersion,
    new: &CustomResourceDefinitionVersion,
) -> bool {
    breaks(old, new).is_empty()
}

/// Every place where `new`'s `spec` refuses what `old`'s accepted.
pub fn breaks(
    old: &CustomResourceDefinitionVersion,
    new: &CustomResourceDefinitionVersion,
) -> Vec<Break> {
    let mut found = Vec::new();
    match (spec_of(old), spec_of(new)) {
        (Some(old), Some(new)) => compare("spec", old, new, &mut found),
        (None, _) => {}
        (Some(_), None) => found.push(Break {
            path: "spec".into(),
            reason: "removed".into(),
        }),
    }
    found
}

fn spec_of(version: &CustomResourceDefinitionVersion) -> Option<&JSONSchemaProps> {
    version
        .schema
        .as_ref()?
        .open_api_v3_schema
        .as_ref()?
        .properties
        .as_ref()?
        .get("spec")
}

fn preserves_unknown(schema: &JSONSchemaProps) -> bool {
    schema.x_kubernetes_preserve_unknown_fields == Some(true)
}

/// The type a node accepts, as a word.
fn type_of(schema: &JSONSchemaProps) -> String {
    if schema.x_kubernetes_int_or_string == Some(true) {
        return "int-or-string".into();
    }
    schema.type_.clone().unwrap_or_else(|| "any".into())
}

/// Whether values of type `old` are all values of type `new`.
fn widens(old: &str, new: &str) -> bool {
    old == new
        || new == "any"
        || (old == "integer" && (new == "number" || new == "int-or-string"))
        || (old == "string" && new == "int-or-string")
}

/// Adds to `found` every break of `new` against `old` at `path` and below.
fn compare(path: &str, old: &JSONSchemaProps, new: &JSONSchemaProps, found: &mut Vec<Break>) {
    // A node that accepts anything accepts whatever the old one did.
    if new.type_.is_none() && new.x_kubernetes_int_or_string.is_none() && preserves_unknown(new) {
        return;
    }
    let mut broke = |reason: String| {
        found.push(Break {
            path: path.to_string(),
            reason,
        })
    };
    let (old_type, new_type) = (type_of(old), type_of(new));
    if !widens(&old_type, &new_type) {
        broke(format!("type {old_type} → {new_type}"));
        return;
    }
    narrowed_node(old, new, &mut broke);
    compare_properties(path, old, new, found);
    compare_items(path, old, new, found);
    compare_map_values(path, old, new, found);
}

/// What the node itself, apart from its members, refuses that the old one accepted.
fn narrowed_node(old: &JSONSchemaProps, new: &JSONSchemaProps, broke: &mut impl FnMut(String)) {
    if preserves_unknown(old) && !preserves_unknown(new) {
        broke("no longer keeps unknown fields".into());
    }
    if old.nullable == Some(true) && new.nullable != Some(true) {
        broke("no longer accepts null".into());
    }
    if let Some(lost) = lost_enum_values(old, new) {
        broke(format!("enum no longer allows {}", lost.join(", ")));
    }
    tightened_bounds(old, new, broke);
    if new.x_kubernetes_validations.is_some()
        && old.x_kubernetes_validations != new.x_kubernetes_validations
    {
        broke("validation rules added or changed".into());
    }
    let old_required = old.required.as_deref().unwrap_or_default();
    for key in new.required.iter().flatten() {
        if !old_required.contains(key) {
            broke(format!("new required field {key}"));
        }
    }
}

/// The values the old node allowed that the new enum refuses, if any.
fn lost_enum_values(old: &JSONSchemaProps, new: &JSONSchemaProps) -> Option<Vec<String>> {
    let new_enum = new.enum_.as_ref()?;
    let lost: Vec<String> = match &old.enum_ {
        Some(old_enum) => old_enum
            .iter()
            .filter(|v| !new_enum.contains(v))
            .map(|v| v.0.to_string())
            .collect(),
        None => vec!["values outside it".into()],
    };
    (!lost.is_empty()).then_some(lost)
}

/// Each old property against the new one; a property only the old node declares is removed
/// unless the new node keeps unknown fields.
fn compare_properties(
    path: &str,
    old: &JSONSchemaProps,
    new: &JSONSchemaProps,
    found: &mut Vec<Break>,
) {
    let empty = BTreeMap::new();
    let new_properties = new.properties.as_ref().unwrap_or(&empty);
    for (key, old_property) in old.properties.iter().flatten() {
        let child = format!("{path}.{key}");
        match new_properties.get(key) {
            Some(new_property) => compare(&child, old_property, new_property, found),
            None if preserves_unknown(new) => {}
            None => found.push(Break {
                path: child,
                reason: "field removed".into(),
            }),
        }
    }
}

/// The old list items against the new.
fn compare_items(path: &str, old: &JSONSchemaProps, new: &JSONSchemaProps, found: &mut Vec<Break>) {
    match (&old.items, &new.items) {
        (Some(JSONSchemaPropsOrArray::Schema(old)), Some(JSONSchemaPropsOrArray::Schema(new))) => {
            compare(&format!("{path}[]"), old, new, found)
        }
        (Some(_), None) | (None, _) => {}
        _ => found.push(Break {
            path: format!("{path}[]"),
            reason: "items changed shape".into(),
        }),
    }
}

/// The old map values against the new.
fn compare_map_values(
    path: &str,
    old: &JSONSchemaProps,
    new: &JSONSchemaProps,
    found: &mut Vec<Break>,
) {
    match (&old.additional_properties, &new.additional_properties) {
        (Some(JSONSchemaPropsOrBool::Schema(old)), Some(JSONSchemaPropsOrBool::Schema(new))) => {
            compare(&format!("{path}.*"), old, new, found)
        }
        (old, new) if old == new => {}
        (_, Some(JSONSchemaPropsOrBool::Bool(true)) | None) if preserves_unknown(new) => {}
        _ => found.push(Break {
            path: format!("{path}.*"),
            reason: "map values changed".into(),
        }),
    }
}

/// Numeric, length, size, exclusiveness, pattern, format and uniqueness constraints that
/// refuse values the old ones allowed.
fn tightened_bounds(old: &JSONSchemaProps, new: &JSONSchemaProps, broke: &mut impl FnMut(String)) {
    tightened_limits(old, new, broke);
    if new.exclusive_minimum == Some(true) && old.exclusive_minimum != Some(true) {
        broke("minimum became exclusive".into());
    }
    if new.exclusive_maximum == Some(true) && old.exclusive_maximum != Some(true) {
        broke("maximum became exclusive".into());
    }
    changed_text(
        "pattern",
        old.pattern.as_deref(),
        new.pattern.as_deref(),
        broke,
    );
    changed_text(
        "format",
        old.format.as_deref(),
        new.format.as_deref(),
        broke,
    );
    if new.unique_items == Some(true) && old.unique_items != Some(true) {
        broke("items must now be unique".into());
    }
    if new.x_kubernetes_list_type.as_deref() == Some("set")
        && old.x_kubernetes_list_type.as_deref() != Some("set")
    {
        broke("items must now be unique".into());
    }
}

/// Numeric, length and size limits that moved inwards or appeared.
fn tightened_limits(old: &JSONSchemaProps, new: &JSONSchemaProps, broke: &mut impl FnMut(String)) {
    for ((name, old, bound), (_, new, _)) in limits(old).into_iter().zip(limits(new)) {
        let Some(new) = new else { continue };
        let tighter = match (old, bound) {
            (None, _) => true,
            (Some(old), Bound::Lower) => new > old,
            (Some(old), Bound::Upper) => new < old,
        };
        if tighter {
            broke(format!("{name} {} → {new}", shown(old)));
        }
    }
}

/// A node's numeric, length and size limits, each with its keyword and side.
fn limits(schema: &JSONSchemaProps) -> [(&'static str, Option<f64>, Bound); 8] {
    let count = |value: Option<i64>| value.map(|v| v as f64);
    [
        ("minimum", schema.minimum, Bound::Lower),
        ("maximum", schema.maximum, Bound::Upper),
        ("minLength", count(schema.min_length), Bound::Lower),
        ("maxLength", count(schema.max_length), Bound::Upper),
        ("minItems", count(schema.min_items), Bound::Lower),
        ("maxItems", count(schema.max_items), Bound::Upper),
        ("minProperties", count(schema.min_properties), Bound::Lower),
        ("maxProperties", count(schema.max_properties), Bound::Upper),
    ]
}

/// A text constraint (`pattern`, `format`) the new node sets differently.
fn changed_text(name: &str, old: Option<&str>, new: Option<&str>, broke: &mut impl FnMut(String)) {
    if new.is_some() && new != old {
        broke(format!(
            "{name} {} → {}",
            old.unwrap_or("none"),
            new.unwrap_or_default()
        ));
    }
}

/// Which side of a range a constraint limits.
enum Bound {
    Lower,
    Upper,
}

fn shown(value: Option<f64>) -> String {
    value.map_or_else(|| "none".into(), |v| v.to_string())
}

#[cfg(test)]
#[path = "compat_tests.rs"]
mod tests;
