//! Which registration Secrets a placement selects. The operator grants a definition's
//! controllers `get`, `list` and `watch` on exactly these names and publishes them in the
//! definition's status; the controller's registry then watches each of them by name.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};

use super::{Error, is_registered};
use crate::api::LOCAL_CLUSTER;
use crate::api::{ClusterPlacement, Placement};

/// `selector` as a matcher, or why it cannot be one.
pub(super) fn matcher(selector: Option<&LabelSelector>) -> Result<Option<Selector>, Error> {
    selector
        .map(|selector| Selector::try_from(selector.clone()))
        .transpose()
        .map_err(|err| Error::InvalidSelector {
            detail: err.0.clone(),
        })
}

/// The registration Secrets `placement` selects among `secrets` (each a name and its labels),
/// by name; `None` when it places on the management cluster only, which needs no Secret.
///
/// `AllClusters` selects every registration Secret, `Selector` those whose labels match
/// `clusterSelector`. Secrets without a registration label, and one named `local` (the
/// management cluster's name, which no Secret may take), are never selected. A `Selector`
/// placement without a valid `clusterSelector` selects nothing: its controller reports the
/// selector on every composition, and must not read any Secret meanwhile.
pub fn selected_secrets<'a>(
    placement: &Placement,
    secrets: impl IntoIterator<Item = (&'a str, &'a BTreeMap<String, String>)>,
) -> Option<BTreeSet<String>> {
    let selector = match placement.clusters {
        ClusterPlacement::Local => return None,
        ClusterPlacement::AllClusters => None,
        ClusterPlacement::Selector => match matcher(placement.cluster_selector.as_ref()) {
            Ok(Some(selector)) => Some(selector),
            Ok(None) | Err(_) => return Some(BTreeSet::new()),
        },
    };
    let selected = secrets
        .into_iter()
        .filter(|(name, labels)| *name != LOCAL_CLUSTER && is_registered(labels))
        .filter(|(_, labels)| selector.as_ref().is_none_or(|s| s.matches(labels)))
        .map(|(name, _)| name.to_string())
        .collect();
    Some(selected)
}
