//! How a new chart version reaches a definition's compositions (`spec.rollout`): in waves of
//! releases (one composition on one cluster), each gated by the health of the one before, and
//! what the operator records of it (`status.rollout`). The operator lets a release move by
//! naming its cluster in the composition's [`MOVE_CLUSTERS_ANNOTATION`]; the controller that
//! owns the composition upgrades only the releases named there.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A new value tries a rolled back or halted chart version again.
pub const RETRY_ROLLOUT_ANNOTATION: &str = "compositor.dev/retry-rollout";

/// On a composition, `<version>:<cluster>,<cluster>…`: during a rollout to `<version>`, the
/// clusters whose release may move there. Written by the operator; a controller of another
/// version ignores it, and without it every release moves.
pub const MOVE_CLUSTERS_ANNOTATION: &str = "compositor.dev/move-clusters";

/// How a new chart version moves through the releases.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    /// Releases moved first, alone: an integer or `N%` of all releases, rounded up (default 1;
    /// 0 moves none alone).
    #[serde(default = "RolloutSpec::default_canary")]
    pub canary: Option<IntOrString>,
    /// After the canary, at most this many releases moving or not healthy yet at once: an
    /// integer or `N%`, rounded down, at least 1 (default `25%`). With `canary: 0`, `100%` moves
    /// every release at once.
    #[serde(default = "RolloutSpec::default_max_unavailable")]
    pub max_unavailable: Option<IntOrString>,
    /// A moved release not healthy within this fails the rollout (default 300).
    #[serde(default = "RolloutSpec::default_health_timeout")]
    pub health_timeout_seconds: u32,
    /// What a failed rollout does.
    #[serde(default)]
    pub on_failure: OnFailure,
    /// Releases on clusters matching the first selector move first, then those matching the
    /// next, and so on; the rest last. A wave starts once the one before is healthy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_waves: Vec<LabelSelector>,
}

impl RolloutSpec {
    fn default_canary() -> Option<IntOrString> {
        Some(IntOrString::Int(1))
    }

    fn default_max_unavailable() -> Option<IntOrString> {
        Some(IntOrString::String("25%".to_string()))
    }

    fn default_health_timeout() -> u32 {
        300
    }

    /// How many releases of `total` the canary is, or why `spec.rollout.canary` is not a count.
    pub fn canary_of(&self, total: usize) -> Result<usize, String> {
        let canary = self.canary.clone().or_else(RolloutSpec::default_canary);
        let counted = canary.map_or(Ok(1), |c| {
            amount(&c, total, Round::Up, "spec.rollout.canary")
        });
        Ok(counted?.min(total))
    }

    /// How many releases of `total` may be moving or not healthy at once, or why
    /// `spec.rollout.maxUnavailable` is not a count.
    pub fn max_unavailable_of(&self, total: usize) -> Result<usize, String> {
        let field = "spec.rollout.maxUnavailable";
        let max = self
            .max_unavailable
            .clone()
            .or_else(RolloutSpec::default_max_unavailable);
        let counted = max.map_or(Ok(1), |m| amount(&m, total, Round::Down, field));
        Ok(counted?.max(1))
    }

    /// Why the spec cannot be followed, naming the field.
    pub fn problem(&self) -> Option<String> {
        let counts = [self.canary_of(100), self.max_unavailable_of(100)];
        if let Some(Err(problem)) = counts.into_iter().find(Result::is_err) {
            return Some(problem);
        }
        self.cluster_waves.iter().enumerate().find_map(|(i, wave)| {
            let parsed = kube::core::Selector::try_from(wave.clone());
            parsed
                .err()
                .map(|e| format!("spec.rollout.clusterWaves[{i}]: {}", e.0))
        })
    }
}

impl Default for RolloutSpec {
    fn default() -> Self {
        RolloutSpec {
            canary: RolloutSpec::default_canary(),
            max_unavailable: RolloutSpec::default_max_unavailable(),
            health_timeout_seconds: RolloutSpec::default_health_timeout(),
            on_failure: OnFailure::default(),
            cluster_waves: Vec::new(),
        }
    }
}

#[derive(Clone, Copy)]
enum Round {
    Up,
    Down,
}

/// `value` (an integer or `N%` of `total`) as a count.
fn amount(value: &IntOrString, total: usize, round: Round, field: &str) -> Result<usize, String> {
    match value {
        IntOrString::Int(n) => usize::try_from(*n).map_err(|_| format!("{field}: {n} is negative")),
        IntOrString::String(text) => {
            let percent = text
                .strip_suffix('%')
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|n| *n <= 100)
                .ok_or_else(|| format!("{field}: {text:?} is neither an integer nor 0%–100%"))?;
            let share = total * percent;
            Ok(match round {
                Round::Up => share.div_ceil(100),
                Round::Down => share / 100,
            })
        }
    }
}

/// What a failed rollout does with the releases already moved.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum OnFailure {
    /// They return to the previous chart version and values.
    #[default]
    Rollback,
    /// They stay, for someone to look at; nothing else moves.
    Halt,
}

/// The latest rollout of a definition.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The chart version the releases come from, and return to on a rollback.
    pub from: String,
    /// The chart version they move to.
    pub to: String,
    /// Progressing, Complete, Halted or RolledBack.
    pub phase: RolloutPhase,
    /// Releases on `to`, or asked to move there.
    pub moved: u32,
    /// Of those, the ones healthy on `to`.
    pub healthy: u32,
    /// Every release the rollout moves.
    pub total: u32,
    /// The releases that failed it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<FailedRelease>,
    /// Releases that were unhealthy before they moved (`namespace/name@cluster`): they move
    /// last, and their health on `to` does not decide the rollout.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unhealthy_before: Vec<String>,
    /// When releases were last asked to move: a release asked then and not written yet counts
    /// its timeout from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_move_time: Option<Time>,
    /// The `compositor.dev/retry-rollout` annotation's value when the rollout began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<String>,
}

/// Where a rollout is.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RolloutPhase {
    /// Releases are moving, wave after wave.
    Progressing,
    /// Every release is healthy on the new version.
    Complete,
    /// A release failed; those moved stay, nothing else moves.
    Halted,
    /// A release failed; those moved returned to the previous version.
    RolledBack,
}

impl RolloutPhase {
    /// Whether the rollout stopped on a failure.
    pub fn failed(self) -> bool {
        matches!(self, RolloutPhase::Halted | RolloutPhase::RolledBack)
    }
}

/// A release that failed a rollout.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct FailedRelease {
    /// `namespace/name` of the composition.
    pub composition: String,
    /// The cluster of the release.
    pub cluster: String,
    /// Why, e.g. `Unhealthy: Deployment team-a/web: 0/1 available`.
    pub reason: String,
}

/// The clusters a composition's [`MOVE_CLUSTERS_ANNOTATION`] lets move to `version`; `None`
/// when it names another version or is absent: then every release moves.
pub fn clusters_moving_to(annotation: Option<&str>, version: &str) -> Option<BTreeSet<String>> {
    let (named, clusters) = annotation?.split_once(':')?;
    (named == version).then(|| {
        clusters
            .split(',')
            .filter(|c| !c.is_empty())
            .map(str::to_string)
            .collect()
    })
}

/// The [`MOVE_CLUSTERS_ANNOTATION`] value letting `clusters` move to `version`.
pub fn move_clusters_value<'a>(
    version: &str,
    clusters: impl IntoIterator<Item = &'a String>,
) -> String {
    let listed: Vec<&str> = clusters.into_iter().map(String::as_str).collect();
    format!("{version}:{}", listed.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(canary: IntOrString, max_unavailable: IntOrString) -> RolloutSpec {
        RolloutSpec {
            canary: Some(canary),
            max_unavailable: Some(max_unavailable),
            ..RolloutSpec::default()
        }
    }

    #[test]
    fn counts_round_as_documented() {
        let defaults = RolloutSpec::default();
        assert_eq!(defaults.canary_of(50), Ok(1));
        assert_eq!(defaults.max_unavailable_of(50), Ok(12));
        assert_eq!(defaults.max_unavailable_of(3), Ok(1), "at least one");
        let percent = |p: &str| IntOrString::String(p.to_string());
        let shares = spec(percent("10%"), percent("100%"));
        assert_eq!(shares.canary_of(11), Ok(2), "canary rounds up");
        assert_eq!(shares.max_unavailable_of(11), Ok(11));
        assert_eq!(spec(IntOrString::Int(9), percent("1%")).canary_of(4), Ok(4));
        assert_eq!(spec(IntOrString::Int(0), percent("1%")).canary_of(4), Ok(0));
    }

    #[test]
    fn bad_counts_name_the_field() {
        let problem = spec(IntOrString::Int(-1), IntOrString::Int(1)).problem();
        assert_eq!(
            problem.as_deref(),
            Some("spec.rollout.canary: -1 is negative")
        );
        let problem = spec(IntOrString::Int(1), IntOrString::String("half".into())).problem();
        assert_eq!(
            problem.as_deref(),
            Some("spec.rollout.maxUnavailable: \"half\" is neither an integer nor 0%–100%")
        );
        let problem = spec(IntOrString::Int(1), IntOrString::String("120%".into())).problem();
        assert!(problem.is_some_and(|p| p.contains("120%")));
        assert_eq!(RolloutSpec::default().problem(), None);
    }

    #[test]
    fn the_clusters_annotation_speaks_of_one_version() {
        let clusters = ["east".to_string(), "west".to_string()];
        let value = move_clusters_value("v2", &clusters);
        assert_eq!(value, "v2:east,west");
        let named = clusters_moving_to(Some(&value), "v2").unwrap();
        assert_eq!(named.into_iter().collect::<Vec<_>>(), clusters);
        assert_eq!(clusters_moving_to(Some(&value), "v3"), None);
        assert_eq!(clusters_moving_to(None, "v2"), None);
        assert_eq!(clusters_moving_to(Some("v2:"), "v2"), Some(BTreeSet::new()));
    }
}
