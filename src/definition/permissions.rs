//! The kinds a chart can create, resolved to resources through API discovery.

use std::collections::BTreeSet;

use kube::Client;
use kube::core::GroupVersionKind;
use kube::discovery::{Scope, pinned_kind};
use serde_json::json;

use crate::bundle::{ResolvedKind, TypeRef, chart_kinds};
use crate::chart::Fetched;
use crate::helm::{self, parse_manifest};

/// What a chart can create, and what could not be resolved.
#[derive(Clone, Debug, Default)]
pub struct ChartKinds {
    /// Kinds resolved to resources.
    pub resolved: BTreeSet<ResolvedKind>,
    /// Warnings: kinds discovery does not know (yet), or a chart that does not render with its
    /// own defaults.
    pub warnings: Vec<String>,
}

impl ChartKinds {
    /// Whether some kind could not be resolved and a later attempt may do better.
    pub fn incomplete(&self) -> bool {
        !self.warnings.is_empty()
    }
}

/// The kinds `fetched` can create: rendered with the chart's defaults, plus every literal kind
/// in its templates and subcharts, each resolved through discovery.
pub async fn chart_kinds_of(
    client: &Client,
    engine: &helm::Engine,
    fetched: &Fetched,
) -> ChartKinds {
    let mut warnings = Vec::new();
    let rendered = match engine
        .template(&fetched.archive_path, "rbac-probe", "default", &json!({}))
        .await
    {
        Ok(manifest) => parse_manifest(&manifest).unwrap_or_else(|error| {
            warnings.push(format!(
                "chart defaults render an unreadable manifest: {error}"
            ));
            Vec::new()
        }),
        Err(error) => {
            warnings.push(format!("chart does not render with its own defaults ({error}); using the kinds its templates name"));
            Vec::new()
        }
    };
    let mut resolved = BTreeSet::new();
    for kind in chart_kinds(&rendered, &fetched.package.all_templates()) {
        match resolve(client, &kind).await {
            Ok(found) => {
                resolved.insert(found);
            }
            Err(error) => warnings.push(format!(
                "kind {kind} is not served by the cluster ({error}); retrying"
            )),
        }
    }
    ChartKinds { resolved, warnings }
}

async fn resolve(client: &Client, kind: &TypeRef) -> Result<ResolvedKind, kube::Error> {
    let gvk = GroupVersionKind::gvk(kind.group(), kind.version(), &kind.kind);
    let (resource, capabilities) = pinned_kind(client, &gvk).await?;
    Ok(ResolvedKind {
        group: resource.group,
        plural: resource.plural,
        namespaced: capabilities.scope == Scope::Namespaced,
    })
}
