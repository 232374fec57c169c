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

fn compare(path: &str, old: &JSONSchemaProps, new: &JSONSchemaProps, found: &mut Vec<Break>) {
    let mut broke = |reason: String| {
        found.push(Break {
            path: path.to_string(),
            reason,
        })
    };
    // A node that accepts anything accepts whatever the old one did.
    if new.type_.is_none() && new.x_kubernetes_int_or_string.is_none() && preserves_unknown(new) {
        return;
    }
    let (old_type, new_type) = (type_of(old), type_of(new));
    if !widens(&old_type, &new_type) {
        broke(format!("type {old_type} → {new_type}"));
        return;
    }
    if preserves_unknown(old) && !preserves_unknown(new) {
        broke("no longer keeps unknown fields".into());
    }
    if old.nullable == Some(true) && new.nullable != Some(true) {
        broke("no longer accepts null".into());
    }
    if let Some(new_enum) = &new.enum_ {
        let lost: Vec<String> = match &old.enum_ {
            Some(old_enum) => old_enum
                .iter()
                .filter(|v| !new_enum.contains(v))
                .map(|v| v.0.to_string())
                .collect(),
            None => vec!["values outside it".into()],
        };
        if !lost.is_empty() {
            broke(format!("enum no longer allows {}", lost.join(", ")));
        }
    }
    tightened_bounds(old, new, &mut broke);
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

/// Numeric, length, size and pattern constraints that refuse values the old ones allowed.
fn tightened_bounds(old: &JSONSchemaProps, new: &JSONSchemaProps, broke: &mut impl FnMut(String)) {
    let count = |value: Option<i64>| value.map(|v| v as f64);
    let bounds = [
        ("minimum", old.minimum, new.minimum, Bound::Lower),
        ("maximum", old.maximum, new.maximum, Bound::Upper),
        (
            "minLength",
            count(old.min_length),
            count(new.min_length),
            Bound::Lower,
        ),
        (
            "maxLength",
            count(old.max_length),
            count(new.max_length),
            Bound::Upper,
        ),
        (
            "minItems",
            count(old.min_items),
            count(new.min_items),
            Bound::Lower,
        ),
        (
            "maxItems",
            count(old.max_items),
            count(new.max_items),
            Bound::Upper,
        ),
        (
            "minProperties",
            count(old.min_properties),
            count(new.min_properties),
            Bound::Lower,
        ),
        (
            "maxProperties",
            count(old.max_properties),
            count(new.max_properties),
            Bound::Upper,
        ),
    ];
    for (name, old, new, bound) in bounds {
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
    if new.exclusive_minimum == Some(true) && old.exclusive_minimum != Some(true) {
        broke("minimum became exclusive".into());
    }
    if new.exclusive_maximum == Some(true) && old.exclusive_maximum != Some(true) {
        broke("maximum became exclusive".into());
    }
    if new.pattern.is_some() && new.pattern != old.pattern {
        broke(format!(
            "pattern {} → {}",
            old.pattern.as_deref().unwrap_or("none"),
            new.pattern.as_deref().unwrap_or_default()
        ));
    }
    if new.format.is_some() && new.format != old.format {
        broke(format!(
            "format {} → {}",
            old.format.as_deref().unwrap_or("none"),
            new.format.as_deref().unwrap_or_default()
        ));
    }
    if new.unique_items == Some(true) && old.unique_items != Some(true) {
        broke("items must now be unique".into());
    }
    if new.x_kubernetes_list_type.as_deref() == Some("set")
        && old.x_kubernetes_list_type.as_deref() != Some("set")
    {
        broke("items must now be unique".into());
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
