//! What a chart writes: its footprint, learnt from a render with its own default values, with
//! every kind resolved to its resource by the chart's own CRDs or by API discovery.

use std::collections::{BTreeMap, BTreeSet};

use kube::Client;
use kube::core::GroupVersionKind;
use kube::discovery::{Scope, pinned_kind};
use serde_json::json;

use crate::bundle::{
    Footprint, PROBE_NAMESPACE, PROBE_RELEASE, ResolvedKind, TypeRef, chart_kinds, crd_kinds,
    literal_kinds,
};
use crate::chart::Fetched;
use crate::helm::{self, parse_documents};

/// A chart's footprint, and what could not be learnt.
#[derive(Clone, Debug, Default)]
pub struct ChartFootprint {
    /// What the chart writes.
    pub footprint: Footprint,
    /// Warnings: kinds discovery does not know (yet), or a chart that does not render with its
    /// own defaults.
    pub warnings: Vec<String>,
}

impl ChartFootprint {
    /// Whether something could not be learnt and a later attempt may do better.
    pub fn incomplete(&self) -> bool {
        !self.warnings.is_empty()
    }
}

/// The footprint of `fetched`: rendered with the chart's defaults (templates, hooks and `crds/`),
/// plus every literal kind in its templates and subcharts.
pub async fn footprint_of(
    client: &Client,
    engine: &helm::Engine,
    fetched: &Fetched,
) -> ChartFootprint {
    let mut warnings = Vec::new();
    let documents = match engine
        .template(
            &fetched.archive_path,
            PROBE_RELEASE,
            PROBE_NAMESPACE,
            &json!({}),
        )
        .await
    {
        Ok(manifest) => parse_documents(&manifest).unwrap_or_else(|error| {
            warnings.push(format!(
                "chart defaults render an unreadable manifest: {}",
                crate::runtime::error_message(&error)
            ));
            Vec::new()
        }),
        Err(error) => {
            warnings.push(format!(
                "chart does not render with its own defaults ({}); using the kinds its templates name",
                crate::runtime::error_message(&error)
            ));
            Vec::new()
        }
    };
    let templates = fetched.package.all_templates();
    let rendered: Vec<_> = documents.iter().map(|d| d.object.clone()).collect();
    let own_crds = crd_kinds(&documents);
    let mut resolved = BTreeMap::new();
    for kind in chart_kinds(&rendered, &templates) {
        let found = match own_crds.get(&kind) {
            Some(found) => Ok(found.clone()),
            None => resolve(client, &kind).await,
        };
        match found {
            Ok(found) => {
                resolved.insert(kind, found);
            }
            Err(error) => warnings.push(format!(
                "kind {kind} is not served by the cluster ({}); retrying",
                crate::runtime::error_message(&error)
            )),
        }
    }
    let literal: BTreeSet<TypeRef> = templates
        .iter()
        .flat_map(|template| literal_kinds(&template.content))
        .collect();
    ChartFootprint {
        footprint: Footprint::derive(&documents, &literal, &resolved),
        warnings,
    }
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
