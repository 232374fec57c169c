//! The size guard: a CRD holds every served version's schema in one etcd object (1.5 MiB by
//! default), so each version's schema must stay within a budget. Descriptions go first, the
//! longest first, because they carry no validation.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};

use super::Error;
use crate::schema::Warning;

/// Default budget of one version's schema: room for several versions, managed fields and
/// annotations under etcd's limit.
pub const DEFAULT_MAX_VERSION_BYTES: usize = 256 * 1024;

/// The serialised size of a schema in bytes.
pub fn schema_bytes(schema: &JSONSchemaProps) -> Result<usize, Error> {
    serde_json::to_vec(schema)
        .map(|v| v.len())
        .map_err(Error::Serialize)
}

/// Shrinks `schema` under `limit` by removing descriptions, longest first; a warning says how
/// many went. Fails when the schema is too large even without them.
pub fn fit(
    schema: &mut JSONSchemaProps,
    limit: usize,
    version: &str,
) -> Result<Option<Warning>, Error> {
    let size = schema_bytes(schema)?;
    if size <= limit {
        return Ok(None);
    }
    let mut lengths = Vec::new();
    visit(schema, &mut |p| {
        if let Some(d) = &p.description {
            // `"description":"…",` as serialised.
            let bytes = serde_json::to_string(d).map_or(d.len() + 2, |s| s.len()) + 15;
            lengths.push(bytes);
        }
    });
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by(|a, b| lengths[*b].cmp(&lengths[*a]));
    let mut remove = vec![false; lengths.len()];
    let mut estimate = size;
    for i in order {
        if estimate <= limit {
            break;
        }
        remove[i] = true;
        estimate = estimate.saturating_sub(lengths[i]);
    }
    let mut index = 0;
    let mut removed = 0;
    visit_mut(schema, &mut |p| {
        if p.description.is_some() {
            if remove[index] {
                p.description = None;
                removed += 1;
            }
            index += 1;
        }
    });
    let size = schema_bytes(schema)?;
    if size > limit {
        return Err(Error::TooLarge {
            version: version.to_owned(),
            size,
            limit,
        });
    }
    Ok(Some(Warning::new(
        "spec",
        "description",
        format!(
            "{removed} descriptions removed, longest first, to fit the schema in {limit} bytes"
        ),
    )))
}

fn children(p: &JSONSchemaProps) -> Vec<&JSONSchemaProps> {
    let mut out: Vec<&JSONSchemaProps> = Vec::new();
    if let Some(props) = &p.properties {
        out.extend(props.values());
    }
    if let Some(JSONSchemaPropsOrArray::Schema(s)) = &p.items {
        out.push(s);
    }
    if let Some(JSONSchemaPropsOrBool::Schema(s)) = &p.additional_properties {
        out.push(s);
    }
    out
}

fn visit(p: &JSONSchemaProps, f: &mut impl FnMut(&JSONSchemaProps)) {
    f(p);
    for c in children(p) {
        visit(c, f);
    }
}

fn visit_mut(p: &mut JSONSchemaProps, f: &mut impl FnMut(&mut JSONSchemaProps)) {
    f(p);
    // Same order as `children`, so indices match.
    if let Some(props) = &mut p.properties {
        for c in props.values_mut() {
            visit_mut(c, f);
        }
    }
    if let Some(JSONSchemaPropsOrArray::Schema(s)) = &mut p.items {
        visit_mut(s, f);
    }
    if let Some(JSONSchemaPropsOrBool::Schema(s)) = &mut p.additional_properties {
        visit_mut(s, f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn wide(n: usize, desc_len: usize) -> JSONSchemaProps {
        let props: BTreeMap<String, JSONSchemaProps> = (0..n)
            .map(|i| {
                (
                    format!("p{i}"),
                    JSONSchemaProps {
                        type_: Some("string".to_owned()),
                        description: Some("d".repeat(desc_len + i)),
                        ..Default::default()
                    },
                )
            })
            .collect();
        JSONSchemaProps {
            type_: Some("object".to_owned()),
            properties: Some(props),
            ..Default::default()
        }
    }

    #[test]
    fn small_schemas_are_untouched() {
        let mut s = wide(3, 10);
        assert!(fit(&mut s, 10_000, "v1").unwrap().is_none());
    }

    #[test]
    fn longest_descriptions_go_first() {
        let mut s = wide(10, 100);
        let full = schema_bytes(&s).unwrap();
        let w = fit(&mut s, full - 150, "v1").unwrap().unwrap();
        assert!(w.action.starts_with("2 descriptions"), "{w}");
        let props = s.properties.unwrap();
        assert!(props["p9"].description.is_none() && props["p8"].description.is_none());
        assert!(props["p7"].description.is_some());
    }

    #[test]
    fn too_large_without_descriptions_is_an_error() {
        let mut s = wide(100, 10);
        let err = fit(&mut s, 100, "v1").unwrap_err();
        assert_eq!(err.reason(), "SchemaTooLarge");
    }
}
