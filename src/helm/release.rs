//! What Helm says about a release: its state, its revisions, and the JSON it prints them as.
//!
//! Helm 3 and Helm 4 print different shapes (Helm 4's `status -o json` has no `chart`, and
//! `history` names the chart as `name-version` in one string), so everything is parsed from the
//! few fields both share, and nothing else is assumed.

use serde::Deserialize;

/// The state of one revision, as Helm records it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ReleaseStatus {
    /// The revision is live.
    Deployed,
    /// The install, upgrade or rollback that made the revision failed.
    Failed,
    /// An install started and has not finished (or its process died).
    PendingInstall,
    /// An upgrade started and has not finished (or its process died).
    PendingUpgrade,
    /// A rollback started and has not finished (or its process died).
    PendingRollback,
    /// An uninstall is in progress.
    Uninstalling,
    /// A later revision replaced this one.
    Superseded,
    /// Any other state, in Helm's words (`uninstalled`, `unknown`, or one added later).
    Unknown(String),
}

impl ReleaseStatus {
    /// Helm's name for the state (`deployed`, `pending-upgrade`, …).
    pub fn as_str(&self) -> &str {
        match self {
            ReleaseStatus::Deployed => "deployed",
            ReleaseStatus::Failed => "failed",
            ReleaseStatus::PendingInstall => "pending-install",
            ReleaseStatus::PendingUpgrade => "pending-upgrade",
            ReleaseStatus::PendingRollback => "pending-rollback",
            ReleaseStatus::Uninstalling => "uninstalling",
            ReleaseStatus::Superseded => "superseded",
            ReleaseStatus::Unknown(other) => other,
        }
    }

    /// True for the states Helm refuses to upgrade from ("another operation is in progress"):
    /// an operation that never finished, which only a rollback (or uninstall) clears.
    pub fn is_pending(&self) -> bool {
        matches!(
            self,
            ReleaseStatus::PendingInstall
                | ReleaseStatus::PendingUpgrade
                | ReleaseStatus::PendingRollback
        )
    }
}

impl From<&str> for ReleaseStatus {
    fn from(status: &str) -> Self {
        match status {
            "deployed" => ReleaseStatus::Deployed,
            "failed" => ReleaseStatus::Failed,
            "pending-install" => ReleaseStatus::PendingInstall,
            "pending-upgrade" => ReleaseStatus::PendingUpgrade,
            "pending-rollback" => ReleaseStatus::PendingRollback,
            "uninstalling" => ReleaseStatus::Uninstalling,
            "superseded" => ReleaseStatus::Superseded,
            other => ReleaseStatus::Unknown(other.to_string()),
        }
    }
}

impl std::fmt::Display for ReleaseStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The latest revision of a release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    /// The release name.
    pub name: String,
    /// The namespace the release (its storage Secrets) lives in.
    pub namespace: String,
    /// The revision number, from 1.
    pub revision: u64,
    /// The revision's state.
    pub status: ReleaseStatus,
    /// The version of the chart the revision was made from.
    pub chart_version: String,
    /// The rendered manifest Helm applied.
    pub manifest: String,
}

/// One entry of a release's history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Revision {
    /// The revision number, from 1.
    pub revision: u64,
    /// The revision's state.
    pub status: ReleaseStatus,
    /// The version of the chart the revision was made from.
    pub chart_version: String,
}

/// A release as `upgrade -o json` (and Helm 3's `status -o json`) print it.
#[derive(Deserialize)]
struct ReleaseJson {
    name: String,
    namespace: String,
    version: u64,
    info: InfoJson,
    chart: Option<ChartJson>,
    #[serde(default)]
    manifest: String,
}

#[derive(Deserialize)]
struct InfoJson {
    status: String,
}

#[derive(Deserialize)]
struct ChartJson {
    metadata: ChartMetadataJson,
}

#[derive(Deserialize)]
struct ChartMetadataJson {
    version: String,
}

/// `get metadata -o json` (Helm 3.13+ and 4): the chart version and state without live objects.
#[derive(Deserialize)]
pub(super) struct MetadataJson {
    name: String,
    namespace: String,
    revision: u64,
    status: String,
    version: String,
}

/// One line of `history -o json`.
#[derive(Deserialize)]
struct HistoryJson {
    revision: u64,
    status: String,
    chart: String,
}

/// Reads the release printed by `upgrade --install -o json`.
pub(super) fn parse_release(json: &str) -> Result<Release, serde_json::Error> {
    let release: ReleaseJson = serde_json::from_str(json)?;
    Ok(Release {
        name: release.name,
        namespace: release.namespace,
        revision: release.version,
        status: release.info.status.as_str().into(),
        chart_version: release
            .chart
            .map(|chart| chart.metadata.version)
            .unwrap_or_default(),
        manifest: release.manifest,
    })
}

/// Reads `get metadata -o json`.
pub(super) fn parse_metadata(json: &str) -> Result<MetadataJson, serde_json::Error> {
    serde_json::from_str(json)
}

impl MetadataJson {
    /// The revision this metadata describes.
    pub(super) fn revision(&self) -> u64 {
        self.revision
    }

    /// The release, completed with the manifest fetched separately.
    pub(super) fn into_release(self, manifest: String) -> Release {
        Release {
            name: self.name,
            namespace: self.namespace,
            revision: self.revision,
            status: self.status.as_str().into(),
            chart_version: self.version,
            manifest,
        }
    }
}

/// Reads `history -o json`, oldest first.
pub(super) fn parse_history(json: &str) -> Result<Vec<Revision>, serde_json::Error> {
    let lines: Vec<HistoryJson> = serde_json::from_str(json)?;
    Ok(lines
        .into_iter()
        .map(|line| Revision {
            revision: line.revision,
            status: line.status.as_str().into(),
            chart_version: chart_version(&line.chart).to_string(),
        })
        .collect())
}

/// The version part of Helm's `name-version` chart label.
///
/// Chart names may contain dashes and versions may too (`1.0.0-rc-1`), so the version starts at
/// the first dash followed by something that parses as a version; a label that has none is
/// returned whole. A name that itself ends in `-<semver>` is ambiguous in Helm's format.
fn chart_version(label: &str) -> &str {
    label
        .match_indices('-')
        .map(|(at, _)| &label[at + 1..])
        .find(|rest| semver::Version::parse(rest.trim_start_matches('v')).is_ok())
        .unwrap_or(label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_through_helms_words() {
        for word in [
            "deployed",
            "failed",
            "pending-install",
            "pending-upgrade",
            "pending-rollback",
            "uninstalling",
            "superseded",
            "uninstalled",
        ] {
            assert_eq!(ReleaseStatus::from(word).as_str(), word);
        }
        assert_eq!(
            ReleaseStatus::from("pending-upgrade"),
            ReleaseStatus::PendingUpgrade
        );
        assert!(ReleaseStatus::PendingRollback.is_pending());
        assert!(!ReleaseStatus::Failed.is_pending());
        assert_eq!(
            ReleaseStatus::from("uninstalled"),
            ReleaseStatus::Unknown("uninstalled".into())
        );
    }

    #[test]
    fn reads_an_upgrade_result_with_or_without_the_chart() {
        let helm4 = r#"{"name":"r1","info":{"status":"deployed","description":"Install complete"},
            "chart":{"metadata":{"name":"fireworks-app","version":"1.1.5"},"templates":[]},
            "manifest":"---\nkind: ConfigMap\n","version":1,"namespace":"hx","apply_method":"ssa"}"#;
        let release = parse_release(helm4).expect("release");
        assert_eq!(
            release,
            Release {
                name: "r1".into(),
                namespace: "hx".into(),
                revision: 1,
                status: ReleaseStatus::Deployed,
                chart_version: "1.1.5".into(),
                manifest: "---\nkind: ConfigMap\n".into(),
            }
        );
        let bare = r#"{"name":"r1","info":{"status":"failed"},"version":2,"namespace":"hx"}"#;
        let release = parse_release(bare).expect("release");
        assert_eq!(release.status, ReleaseStatus::Failed);
        assert_eq!(release.chart_version, "");
        assert_eq!(release.manifest, "");
    }

    #[test]
    fn reads_metadata() {
        let json = r#"{"name":"r1","chart":"fireworks-app","version":"1.1.6","appVersion":"1.0",
            "labels":{"status":"pending-upgrade"},"namespace":"hx","revision":2,
            "status":"pending-upgrade","deployedAt":"2026-11-22T07:56:29Z","applyMethod":"ssa"}"#;
        let metadata = parse_metadata(json).expect("metadata");
        assert_eq!(metadata.revision(), 2);
        let release = metadata.into_release("m".into());
        assert_eq!(release.status, ReleaseStatus::PendingUpgrade);
        assert_eq!(release.chart_version, "1.1.6");
        assert_eq!(release.manifest, "m");
    }

    #[test]
    fn reads_history_and_splits_chart_labels() {
        let json = r#"[{"revision":1,"updated":"x","status":"superseded","chart":"fireworks-app-1.1.5","app_version":"1.0","description":"Install complete"},
            {"revision":2,"updated":"x","status":"deployed","chart":"fireworks-app-1.1.6","app_version":"1.0","rollback_revision":1,"description":"Rollback to 1"}]"#;
        assert_eq!(
            parse_history(json).expect("history"),
            vec![
                Revision {
                    revision: 1,
                    status: ReleaseStatus::Superseded,
                    chart_version: "1.1.5".into()
                },
                Revision {
                    revision: 2,
                    status: ReleaseStatus::Deployed,
                    chart_version: "1.1.6".into()
                },
            ]
        );
        assert_eq!(chart_version("app-2-web-1.0.0-rc-1"), "1.0.0-rc-1");
        assert_eq!(chart_version("app-v2.0.0"), "v2.0.0");
        assert_eq!(chart_version("odd"), "odd");
    }
}
