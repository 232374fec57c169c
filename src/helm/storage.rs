//! Helm's own record of a release, read from the Secrets its default storage driver keeps, so
//! that confirming an unchanged release starts no `helm` process.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::ReleaseStatus;

/// The labels Helm's storage driver keeps for itself on every record; the others are the
/// release's own (`helm upgrade --labels`).
const STORAGE_LABELS: [&str; 6] = [
    "name",
    "owner",
    "status",
    "version",
    "createdAt",
    "modifiedAt",
];

/// Helm's latest record of a release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The latest revision.
    pub revision: u64,
    /// Its state.
    pub status: ReleaseStatus,
    /// The release's own labels, as `--labels` set them.
    pub labels: BTreeMap<String, String>,
}

/// The latest revision Helm recorded of `release` in `namespace`; `None` when there is no such
/// release. Lists only the records' metadata.
pub async fn latest_record(
    client: &Client,
    namespace: &str,
    release: &str,
) -> Result<Option<Record>, kube::Error> {
    let records = Api::<Secret>::namespaced(client.clone(), namespace)
        .list_metadata(&ListParams::default().labels(&format!("owner=helm,name={release}")))
        .await?;
    Ok(records
        .items
        .iter()
        .filter_map(|record| {
            let labels = record.labels();
            let revision = labels.get("version")?.parse::<u64>().ok()?;
            let status = ReleaseStatus::from(labels.get("status")?.as_str());
            let own = labels
                .iter()
                .filter(|(key, _)| !STORAGE_LABELS.contains(&key.as_str()))
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect();
            Some(Record {
                revision,
                status,
                labels: own,
            })
        })
        .max_by_key(|record| record.revision))
}
