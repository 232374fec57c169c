//! Helm's own record of a release, read from the Secrets its default storage driver keeps, so
//! that confirming an unchanged release, or re-applying what it rendered, starts no `helm`
//! process.

use std::collections::BTreeMap;
use std::io::Read;

use base64::Engine as _;

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

/// Why a release record could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The request failed.
    #[error(transparent)]
    Kube(#[from] kube::Error),
    /// The record is not what Helm's storage driver writes.
    #[error("release record {secret} is unreadable: {detail}")]
    Unreadable {
        /// The record's Secret.
        secret: String,
        /// What was wrong.
        detail: String,
    },
}

/// The manifest Helm recorded for `revision` of `release` in `namespace` (what it applied, after
/// the post-renderer); `None` when there is no such record.
pub async fn recorded_manifest(
    client: &Client,
    namespace: &str,
    release: &str,
    revision: u64,
) -> Result<Option<String>, RecordError> {
    let secret = format!("sh.helm.release.v1.{release}.v{revision}");
    let Some(record) = Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(&secret)
        .await?
    else {
        return Ok(None);
    };
    let data = record.data.unwrap_or_default();
    let encoded = data.get("release").map(|bytes| bytes.0.as_slice());
    let manifest = encoded
        .ok_or_else(|| "no release data".to_string())
        .and_then(decode_manifest);
    manifest
        .map(Some)
        .map_err(|detail| RecordError::Unreadable { secret, detail })
}

/// The `manifest` of a release as Helm's Secret driver stores it: base64 of gzipped JSON.
fn decode_manifest(encoded: &[u8]) -> Result<String, String> {
    let gzipped = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|e| format!("not base64: {e}"))?;
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(gzipped.as_slice())
        .read_to_end(&mut json)
        .map_err(|e| format!("not gzip: {e}"))?;
    #[derive(serde::Deserialize)]
    struct Stored {
        #[serde(default)]
        manifest: String,
    }
    let stored: Stored = serde_json::from_slice(&json).map_err(|e| format!("not JSON: {e}"))?;
    Ok(stored.manifest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_stored_release_gives_its_manifest() {
        let json = serde_json::json!({"name": "acme", "manifest": "---\nkind: ConfigMap\n"});
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gzip.write_all(json.to_string().as_bytes()).unwrap();
        let encoded = base64::engine::general_purpose::STANDARD.encode(gzip.finish().unwrap());
        let manifest = decode_manifest(encoded.as_bytes()).unwrap();
        assert_eq!(manifest, "---\nkind: ConfigMap\n");
        assert!(
            decode_manifest(b"not base64!")
                .unwrap_err()
                .contains("base64")
        );
    }
}
