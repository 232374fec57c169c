//! Helm's own record of a release, read from the Secrets its default storage driver keeps, so
//! that confirming an unchanged release starts no `helm` process.

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
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
        (labels.get("owner").map(String::as_str) == Some("helm")
            && labels.get("name").map(String::as_str) == Some(release))
        .then(|| {
            labels
                .get("status")
                .map(|s| ReleaseStatus::from(s.as_str()))
        })
        .flatten()
    }))
}
