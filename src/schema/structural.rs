//! An offline check of the apiserver's structural-schema rules, so that a conversion bug shows
//! up as a clear message before a CRD is applied (and in tests without an apiserver).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};

/// Every rule of a structural schema `schema` breaks, as `path: problem` lines; empty when the
/// apiserver would accept it. Covers the rules a converter can get wrong: types on every value
/// node, `items` on arrays, forbidden keywords, extension combinations, junctors, `properties`
/// next to `additionalProperties`, and defaults inside junctors.
pub fn structural_problems(schema: &JSONSchemaProps) -> Vec<String> {
    let mut out = Vec::new();
    check(schema, "spec", false, &mut out);
    out
}

fn check(s: &JSONSchemaProps, path: &str, in_junctor: bool, out: &mut Vec<String>) {
    let mut bad = |what: &str| out.push(format!("{path}: {what}"));
    let preserve = s.x_kubernetes_preserve_unknown_fields == Some(true);
    let int_or_string = s.x_kubernetes_int_or_string == Some(true);
    if s.ref_path.is_some() || s.schema.is_some() || s.id.is_some() || s.definitions.is_some() {
        bad("$ref, $schema, id or definitions present");
    }
    if s.pattern_properties.is_some() || s.dependencies.is_some() || s.additional_items.is_some() {
        bad("patternProperties, dependencies or additionalItems present");
    }
    if s.unique_items == Some(true) {
        bad("uniqueItems present");
    }
    if s.x_kubernetes_preserve_unknown_fields == Some(false) {
        bad("x-kubernetes-preserve-unknown-fields: false");
    }
    if s.all_of.is_some() || s.any_of.is_some() || s.one_of.is_some() || s.not.is_some() {
        bad("junctors are never emitted");
    }
    if let Some(t) = &s.type_
        && !matches!(
            t.as_str(),
            "array" | "boolean" | "integer" | "number" | "object" | "string"
        )
    {
        bad("unknown type");
    }
    if !in_junctor && s.type_.is_none() && !preserve && !int_or_string {
        bad("no type, and neither preserve-unknown-fields nor int-or-string");
    }
    if int_or_string && (preserve || s.type_.is_some()) {
        bad("int-or-string together with a type or preserve-unknown-fields");
    }
    if s.type_.as_deref() == Some("array") && s.items.is_none() {
        bad("array without items");
    }
    if matches!(s.items, Some(JSONSchemaPropsOrArray::Schemas(_))) {
        bad("items as a list");
    }
    if s.properties.is_some() && s.additional_properties.is_some() {
        bad("properties next to additionalProperties");
    }
    if s.additional_properties.is_some() && preserve {
        bad("additionalProperties next to preserve-unknown-fields");
    }
    if let Some(lt) = &s.x_kubernetes_list_type {
        if s.type_.as_deref() != Some("array") {
            bad("list-type on a non-array");
        }
        if lt == "set"
            && let Some(JSONSchemaPropsOrArray::Schema(items)) = &s.items
            && matches!(
                items.type_.as_deref(),
                Some("object") | Some("array") | None
            )
        {
            bad("list-type set with non-scalar items");
        }
    }
    if s.x_kubernetes_map_type.is_some() && s.type_.as_deref() != Some("object") {
        bad("map-type on a non-object");
    }
    if let Some(props) = &s.properties {
        for (name, p) in props {
            check(p, &super::warning::child(path, name), in_junctor, out);
        }
    }
    if let Some(JSONSchemaPropsOrArray::Schema(items)) = &s.items {
        check(items, &format!("{path}[*]"), in_junctor, out);
    }
    if let Some(JSONSchemaPropsOrBool::Schema(a)) = &s.additional_properties {
        check(a, &format!("{path}{{*}}"), in_junctor, out);
    }
}
