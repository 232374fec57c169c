//! Helm's own record of a release, read from the Secrets its default storage driver keeps, so
//! that confirming an unchanged release starts no `helm` process.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::ReleaseStatus;

/// The Secret Helm stores `revision` of `release` in.
fn record_name(release: &str, revision: u64) -> String {
    format!("sh.helm.release.v1.{release}.v{revision}")
}

/// The state Helm recorded for `revision` of `release` in `namespace`, if that revision exists.
/// Reads only the Secret's metadata (its `status` label), never the release it holds.
pub async fn recorded_status(
    client: &Client,
    namespace: &str,
    release: &str,
    revision: u64,
) -> Result<Option<ReleaseStatus>, kube::Error> {
    let record = Api::<Secret>::namespaced(client.clone(), namespace)
        .get_metadata_opt(&record_name(release, revision))
        .await?;
    Ok(record.and_then(|record| {
        let labels = record.labels();
        let label = |key: &str| labels.get(key).map(String::as_str);
        if label("owner") != Some("helm") || label("name") != Some(release) {
            return None;
        }
        label("status").map(ReleaseStatus::from)
    }))
}

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
