//! What a release is made of: the chart this version installs, fetched as the definition
//! resolved it, and the composition's values, checked against the chart's own schema.

use kube::ResourceExt;
use kube::core::DynamicObject;
use serde_json::Value;

use super::values::{merged_over, values_of};
use super::{Context, Error};
use crate::api::CompositionDefinition;
use crate::chart::{self, Fetched};
use crate::schema;

/// The chart this version installs: the chart version the definition resolved for it, fetched
/// with the definition's credentials.
pub(super) async fn fetch_chart(
    definition: &CompositionDefinition,
    context: &Context,
) -> Result<Fetched, Error> {
    let mine = &context.config.version;
    let chart_version = definition
        .status
        .as_ref()
        .and_then(|s| s.versions.iter().find(|v| &v.version == mine))
        .map(|v| v.chart_version.clone())
        .ok_or_else(|| Error::DefinitionNotReady(definition.name_any()))?;
    let policy = chart::credentials::RefPolicy {
        namespace: context.config.definition_namespace.clone(),
        allow_cross_namespace: context.config.allow_cross_namespace_refs,
    };
    let mut reference =
        chart::credentials::resolve(&context.client, &policy, &definition.spec.chart).await?;
    reference.version = Some(chart_version);
    Ok(chart::fetch(&reference, &context.cache).await?)
}

/// The composition's values, refused with every path that breaks the chart's schema.
pub(super) fn checked_values(object: &DynamicObject, chart: &Fetched) -> Result<Value, Error> {
    let values = values_of(object.data.get("spec"));
    let violations =
        schema::validate_package(&merged_over(&chart.package.values, &values), &chart.package)?;
    if !violations.is_empty() {
        let listed: Vec<String> = violations.iter().map(ToString::to_string).collect();
        return Err(Error::InvalidValues(listed.join("; ")));
    }
    Ok(values)
}
