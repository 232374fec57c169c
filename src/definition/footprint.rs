//! What a chart writes: its footprint, learnt from a render with its own default values, with
//! every kind resolved to its resource by the chart's own CRDs or by API discovery.

use std::collections::{BTreeMap, BTreeSet};

use kube::Client;
use kube::core::GroupVersionKind;
use kube::discovery::{Scope, pinned_kind};
use serde_json::json;

use crate::chart::{Fetched, Package};
use crate::definition::bundle::Footprint;
use crate::helm::{self, RenderedDocument, parse_documents};
use crate::rbac::{
    PROBE_NAMESPACE, PROBE_RELEASE, Probe, ReleasePlace, ResolvedKind, TypeRef, chart_kinds,
    crd_kinds, literal_kinds,
};

/// A chart's footprint, and what could not be learnt.
#[derive(Clone, Debug, Default)]
pub struct ChartFootprint {
    /// What the chart writes.
    pub footprint: Footprint,
    /// Warnings: a chart that does not render with its own defaults.
    pub warnings: Vec<String>,
    /// Kinds the chart writes that the cluster does not serve.
    pub unserved: Vec<Unserved>,
    /// When an incomplete footprint is learnt again: each attempt waits twice as long as the
    /// one before, so a CRD that never comes costs little.
    pub retry_at: Option<std::time::Instant>,
}

impl ChartFootprint {
    /// Whether something could not be learnt and a later attempt may do better.
    pub fn incomplete(&self) -> bool {
        !self.warnings.is_empty() || self.unserved.iter().any(|kind| !kind.never)
    }
}

/// A kind a chart writes that the cluster does not serve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unserved {
    /// The kind.
    pub kind: TypeRef,
    /// Whether it can never be served: a version of Kubernetes' own API groups that this
    /// cluster does not serve (removed, like `policy/v1beta1`), or `List`, which is no kind.
    /// Any other (a CRD not installed yet, an aggregated API down) may be served later.
    pub never: bool,
    /// What discovery said.
    pub detail: String,
}

impl std::fmt::Display for Unserved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Unserved {
            kind,
            never,
            detail,
        } = self;
        match never {
            true => write!(
                f,
                "{kind}: Kubernetes does not serve this API here ({detail}); objects of it are \
                 never granted and installing them fails"
            ),
            false => write!(
                f,
                "{kind}: not served by the cluster yet ({detail}); looked for again"
            ),
        }
    }
}

/// Kubernetes' own API groups: a version of one of them that the cluster does not serve will not
/// appear later (CRDs cannot add to them).
const KUBERNETES_GROUPS: [&str; 24] = [
    "",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "apiregistration.k8s.io",
    "apps",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "extensions",
    "flowcontrol.apiserver.k8s.io",
    "internal.apiserver.k8s.io",
    "networking.k8s.io",
    "node.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "resource.k8s.io",
    "scheduling.k8s.io",
    "storage.k8s.io",
    "storagemigration.k8s.io",
];

/// Whether `kind`, which discovery did not find, can never be served by this cluster.
fn never_served(kind: &TypeRef) -> bool {
    kind.kind == "List" || KUBERNETES_GROUPS.contains(&kind.group())
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
    let probe = cut_probe(engine, fetched, &documents, probe).await;
    let templates = fetched.package.all_templates();
    let rendered: Vec<_> = documents.iter().map(|d| d.object.clone()).collect();
    let own_crds = crd_kinds(&documents);
    let mut resolved = BTreeMap::new();
    let mut unserved = Vec::new();
    for kind in chart_kinds(&rendered, &templates) {
        let found = match own_crds.get(&kind) {
            Some(found) => Ok(found.clone()),
            None => resolve(client, &kind).await,
        };
        match found {
            Ok(found) => {
                resolved.insert(kind, found);
            }
            Err(error) => unserved.push(Unserved {
                never: never_served(&kind),
                detail: crate::runtime::error_message(&error),
                kind,
            }),
        }
    }
    let literal: BTreeSet<TypeRef> = templates
        .iter()
        .flat_map(|template| literal_kinds(&template.content))
        .collect();
    ChartFootprint {
        footprint: Footprint::derive(&documents, &probe, &literal, &resolved),
        warnings,
        unserved,
        retry_at: None,
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

/// Which names follow the release and are cut at 63 characters: the chart rendered again as a
/// release of Helm's longest name shows them, object for object.
async fn cut_probe(
    engine: &helm::Engine,
    fetched: &Fetched,
    documents: &[RenderedDocument],
    probe: Probe,
) -> Probe {
    let names = |documents: &[RenderedDocument]| -> Vec<String> {
        documents.iter().map(|d| d.object.name.clone()).collect()
    };
    let rendered = names(documents);
    if !rendered.iter().any(|name| name.contains(PROBE_RELEASE)) {
        return probe;
    }
    let Ok(long) = render(engine, fetched, &Probe::long_release()).await else {
        return probe;
    };
    let long = names(&long);
    if long.len() != rendered.len() {
        return probe;
    }
    let cut = probe.cut_names(&rendered, &long);
    probe.with_cut(cut)
}

/// The names a chart and every subchart in it may give Helm's `fullname` helper: its own, and
/// the `nameOverride` its values.yaml sets (argo-cd's is `argocd`).
fn chart_names(package: &Package) -> BTreeSet<String> {
    let mut names: BTreeSet<String> = [package.name().to_string()].into();
    if let Some(name) = package.values["nameOverride"].as_str()
        && !name.is_empty()
    {
        names.insert(name.to_string());
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(api_version: &str, kind: &str) -> TypeRef {
        TypeRef {
            api_version: api_version.into(),
            kind: kind.into(),
        }
    }

    #[test]
    fn a_charts_default_name_override_is_a_name_its_fullname_may_follow() {
        let argo = Package::load(std::path::Path::new(
            "testdata/real-charts/argo-cd-10.1.1.tgz",
        ))
        .expect("argo-cd");
        let names = chart_names(&argo);
        assert!(
            names.contains("argo-cd") && names.contains("argocd"),
            "{names:?}"
        );
    }

    #[test]
    fn kubernetes_own_apis_and_lists_are_never_served_later_and_crds_may_be() {
        assert!(never_served(&kind("policy/v1beta1", "PodSecurityPolicy")));
        assert!(never_served(&kind("extensions/v1beta1", "Ingress")));
        assert!(never_served(&kind("v1", "List")));
        assert!(!never_served(&kind(
            "gateway.networking.k8s.io/v1",
            "Gateway"
        )));
        assert!(!never_served(&kind("cert-manager.io/v1", "Certificate")));
        assert!(!never_served(&kind("cluster.x-k8s.io/v1beta1", "Cluster")));
    }
}
