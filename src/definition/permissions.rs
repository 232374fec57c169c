//! What a chart writes: its footprint, learnt from a render with its own default values, with
//! every kind resolved to its resource by the chart's own CRDs or by API discovery.

use std::collections::{BTreeMap, BTreeSet};

use kube::Client;
use kube::core::GroupVersionKind;
use kube::discovery::{Scope, pinned_kind};
use serde_json::json;

use crate::bundle::{
    Footprint, PROBE_NAMESPACE, PROBE_RELEASE, Probe, ReleasePlace, ResolvedKind, TypeRef,
    chart_kinds, crd_kinds, literal_kinds,
};
use crate::chart::{Fetched, Package};
use crate::helm::{self, RenderedDocument, parse_documents};

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
    let documents = match render(engine, fetched, PROBE_RELEASE).await {
        Ok(documents) => documents,
        Err(error) => {
            warnings.push(error);
            Vec::new()
        }
    };
    let probe = fullname_probe(engine, fetched, &documents).await;
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
        footprint: Footprint::derive(&documents, &probe, &literal, &resolved),
        warnings,
    }
}

/// The chart rendered with its defaults as release `release` in [`PROBE_NAMESPACE`]; what went
/// wrong, as a warning.
async fn render(
    engine: &helm::Engine,
    fetched: &Fetched,
    release: &str,
) -> Result<Vec<RenderedDocument>, String> {
    let manifest = engine
        .template(&fetched.archive_path, release, PROBE_NAMESPACE, &json!({}))
        .await
        .map_err(|error| {
            format!(
                "chart does not render with its own defaults ({}); using the kinds its templates name",
                crate::runtime::error_message(&error)
            )
        })?;
    parse_documents(&manifest).map_err(|error| {
        format!(
            "chart defaults render an unreadable manifest: {}",
            crate::runtime::error_message(&error)
        )
    })
}

/// Which of the chart's (and its subcharts') names follow Helm's `fullname` helper: a chart whose
/// `<release>-<chart>` appears in the probe render's names is rendered again as a release whose
/// name contains the chart's, and follows the helper when every object is named as the helper
/// would name it there.
async fn fullname_probe(
    engine: &helm::Engine,
    fetched: &Fetched,
    documents: &[RenderedDocument],
) -> Probe {
    let names = |documents: &[RenderedDocument]| -> BTreeSet<(String, String, String)> {
        documents
            .iter()
            .map(|d| {
                let namespace = d.object.namespace.clone().unwrap_or_default();
                (d.object.kind.clone(), namespace, d.object.name.clone())
            })
            .collect()
    };
    let rendered: Vec<&str> = documents.iter().map(|d| d.object.name.as_str()).collect();
    let charts = chart_names(&fetched.package);
    let mut following = Vec::new();
    for chart in Probe::fullname_candidates(charts.iter().map(String::as_str), &rendered) {
        let release = Probe::release_containing(&chart);
        let Ok(again) = render(engine, fetched, &release).await else {
            continue;
        };
        let probe = Probe::with_fullnames(vec![chart.clone()]);
        let place = ReleasePlace {
            release,
            namespace: PROBE_NAMESPACE.to_string(),
        };
        let expected: BTreeSet<_> = names(documents)
            .into_iter()
            .map(|(kind, namespace, name)| {
                let fill = |value: &str| place.fill(&probe.pattern(value));
                (kind, fill(&namespace), fill(&name))
            })
            .collect();
        if expected == names(&again) {
            following.push(chart);
        }
    }
    Probe::with_fullnames(following)
}

/// The names of a chart and of every subchart in it.
fn chart_names(package: &Package) -> BTreeSet<String> {
    let mut names: BTreeSet<String> = [package.name().to_string()].into();
    for sub in &package.subcharts {
        names.extend(chart_names(sub));
    }
    names
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
