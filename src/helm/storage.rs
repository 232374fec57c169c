//! Helm's own record of a release, read from the Secrets its default storage driver keeps, so
//! that confirming an unchanged release starts no `helm` process.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::ReleaseStatus;

/// The latest revision Helm recorded of `release` in `namespace`, and its state; `None` when
/// there is no such release. Lists only the records' metadata.
pub async fn latest_record(
    client: &Client,
    namespace: &str,
    release: &str,
) -> Result<Option<(u64, ReleaseStatus)>, kube::Error> {
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
            Some((revision, status))
        })
        .max_by_key(|(revision, _)| *revision))
}
