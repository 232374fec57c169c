//! The releases of a rollout, read from the compositions' status: those of compositions on a
//! compatible older version, and those of compositions the rollout moved already (they carry
//! its `compositor.dev/move-clusters` annotation), each judged by what its controller recorded.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::Timestamp;
use kube::core::{Selector, SelectorExt};

use super::plan::{Release, State};
use crate::api::{ClusterStatus, HealthMode, HealthState, Phase, clusters_moving_to};
use crate::definition::grants::{CompositionUse, VersionUse};
use crate::definition::moves::movable;

/// How a moved release is judged.
pub struct Judge<'a> {
    /// The chart version the rollout moves to.
    pub to_chart: &'a str,
    /// Whether health decides, or Helm's write alone.
    pub health: HealthMode,
    /// How long a moved release may take to become healthy.
    pub timeout_seconds: u32,
    /// When releases were last asked to move: the timeout of one not written yet counts from here.
    pub last_move: Option<Timestamp>,
    /// Now.
    pub now: Timestamp,
}

impl Judge<'_> {
    /// The state of a release allowed to move, from its entry in the composition's status.
    pub fn state(&self, entry: &ClusterStatus) -> State {
        let on_new = entry.chart_version.as_deref() == Some(self.to_chart);
        if on_new && entry.final_failure.is_some() {
            return State::Failed(format!("upgrade refused: {}", entry.message));
        }
        let since = match (on_new, self.health, &entry.health) {
            (false, _, _) => None,
            (true, HealthMode::Ignore, _) if entry.phase == Phase::Ready => return State::Healthy,
            (true, HealthMode::Ignore, _) => entry.last_transition_time.as_ref().map(|t| t.0),
            (true, HealthMode::Wait, Some(health)) => match health.state {
                HealthState::Healthy if entry.phase == Phase::Ready => return State::Healthy,
                HealthState::Unhealthy => {
                    return State::Failed(format!("Unhealthy: {}", health.message));
                }
                _ => health.since.as_ref().map(|t| t.0),
            },
            (true, HealthMode::Wait, None) => None,
        };
        let start = match (since, self.last_move) {
            (Some(since), Some(moved)) => Some(since.max(moved)),
            (since, moved) => since.or(moved),
        };
        let waited = start.map_or(0, |start| self.now.as_second() - start.as_second());
        if waited > i64::from(self.timeout_seconds) {
            let seen = match &entry.health {
                Some(health) if on_new => format!("{:?}: {}", health.state, health.message),
                _ if on_new => format!("{:?}: {}", entry.phase, entry.message),
                _ => "not written yet".to_string(),
            };
            return State::Failed(format!(
                "not healthy within {}s ({seen})",
                self.timeout_seconds
            ));
        }
        State::Moving
    }

    /// Whether the release was unhealthy before it moved: on an older chart, failed there or,
    /// when health decides, unhealthy there.
    pub fn unhealthy_before(&self, entry: &ClusterStatus) -> bool {
        let on_new = entry.chart_version.as_deref() == Some(self.to_chart);
        let unhealthy = match (self.health, &entry.health) {
            (HealthMode::Wait, Some(health)) => health.state == HealthState::Unhealthy,
            _ => false,
        };
        !on_new && (entry.phase == Phase::Failed || unhealthy)
    }
}

/// How a release is named in `status.rollout.unhealthyBefore`.
pub fn release_key(composition: &(String, String), cluster: &str) -> String {
    format!("{}/{}@{cluster}", composition.0, composition.1)
}

/// Which cluster wave a cluster is in: the index of the first selector its labels match.
pub struct Waves<'a> {
    /// The selectors, in order.
    pub selectors: Vec<Selector>,
    /// Every cluster's labels (the management cluster has none).
    pub labels: &'a BTreeMap<String, BTreeMap<String, String>>,
}

impl Waves<'_> {
    fn of(&self, cluster: &str) -> usize {
        let none = BTreeMap::new();
        let labels = self.labels.get(cluster).unwrap_or(&none);
        self.selectors
            .iter()
            .position(|selector| selector.matches(labels))
            .unwrap_or(self.selectors.len())
    }
}

/// The releases of a rollout to `current`, and the compositions to move that have none yet
/// (nothing of theirs runs, so they move at once). A release is excused when it is unhealthy
/// before it moves, or was when the rollout last looked (`unhealthy_before`).
pub fn releases<'a>(
    compositions: &'a BTreeMap<String, VersionUse>,
    breaks: &'a BTreeMap<String, Vec<String>>,
    current: &'a str,
    judge: &Judge<'_>,
    waves: &Waves<'_>,
    unhealthy_before: &[String],
) -> (Vec<Release>, Vec<&'a CompositionUse>) {
    let arriving =
        movable(compositions, breaks, current).map(|c| (c, c.move_to.as_deref() == Some(current)));
    let arrived = compositions
        .get(current)
        .into_iter()
        .flat_map(|used| &used.compositions)
        .filter(|c| clusters_moving_to(c.move_clusters.as_deref(), current).is_some())
        .map(|c| (c, true));
    let mut found = Vec::new();
    let mut unplaced = Vec::new();
    for (composition, asked) in arriving.chain(arrived) {
        let key = (composition.namespace.clone(), composition.name.clone());
        let entries = released_entries(compositions, &key);
        if entries.is_empty() {
            unplaced.push(composition);
            continue;
        }
        let allowed: Option<BTreeSet<String>> =
            clusters_moving_to(composition.move_clusters.as_deref(), current);
        for entry in entries {
            let moves = asked && allowed.as_ref().is_none_or(|set| set.contains(&entry.name));
            let excused = judge.unhealthy_before(entry)
                || unhealthy_before.contains(&release_key(&key, &entry.name));
            found.push(Release {
                composition: key.clone(),
                cluster: entry.name.clone(),
                wave: waves.of(&entry.name),
                state: match moves {
                    true => judge.state(entry),
                    false => State::Waiting,
                },
                excused,
            });
        }
    }
    (found, unplaced)
}

/// A composition's entries in its status, wherever it is counted.
fn released_entries<'a>(
    compositions: &'a BTreeMap<String, VersionUse>,
    key: &(String, String),
) -> &'a [ClusterStatus] {
    compositions
        .values()
        .find_map(|used| used.releases.get(key))
        .map_or(&[], Vec::as_slice)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};

    use super::*;
    use crate::api::{FinalFailure, ReleaseHealth};

    const NOW: i64 = 1_800_000_000;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap()
    }

    fn judge(health: HealthMode, last_move: Option<i64>) -> Judge<'static> {
        Judge {
            to_chart: "2.0.0",
            health,
            timeout_seconds: 60,
            last_move: last_move.map(at),
            now: at(NOW),
        }
    }

    fn entry(
        cluster: &str,
        chart: &str,
        phase: Phase,
        health: Option<(HealthState, i64)>,
    ) -> ClusterStatus {
        ClusterStatus {
            revision: Some(2),
            chart_version: Some(chart.into()),
            health: health.map(|(state, since)| ReleaseHealth {
                state,
                message: "Deployment team/app-web: 0/1 available".into(),
                since: Some(Time(at(since))),
            }),
            last_transition_time: Some(Time(at(NOW - 5))),
            ..ClusterStatus::new(cluster, "team", "app", phase)
        }
    }

    #[test]
    fn a_release_is_healthy_only_on_the_new_chart() {
        let wait = judge(HealthMode::Wait, Some(NOW - 10));
        let healthy = Some((HealthState::Healthy, NOW - 1));
        assert_eq!(
            wait.state(&entry("local", "2.0.0", Phase::Ready, healthy)),
            State::Healthy
        );
        assert_eq!(
            wait.state(&entry("local", "1.0.0", Phase::Ready, healthy)),
            State::Moving,
            "still the old chart's health"
        );
        let ignore = judge(HealthMode::Ignore, Some(NOW - 10));
        assert_eq!(
            ignore.state(&entry("local", "2.0.0", Phase::Ready, None)),
            State::Healthy
        );
        assert_eq!(
            ignore.state(&entry("local", "2.0.0", Phase::Progressing, None)),
            State::Moving
        );
    }

    #[test]
    fn unhealthy_refused_or_late_fails() {
        let wait = judge(HealthMode::Wait, Some(NOW - 10));
        let unhealthy = Some((HealthState::Unhealthy, NOW - 3));
        let State::Failed(reason) = wait.state(&entry("local", "2.0.0", Phase::Ready, unhealthy))
        else {
            panic!("unhealthy fails");
        };
        assert_eq!(reason, "Unhealthy: Deployment team/app-web: 0/1 available");
        let mut refused = entry("local", "2.0.0", Phase::Failed, None);
        refused.final_failure = Some(FinalFailure {
            inputs: "sha256:1".into(),
            reason: "UpgradeRejected".into(),
        });
        refused.message = "admission webhook denied it".into();
        assert_eq!(
            wait.state(&refused),
            State::Failed("upgrade refused: admission webhook denied it".into())
        );
        let progressing = Some((HealthState::Progressing, NOW - 61));
        let State::Failed(late) = judge(HealthMode::Wait, Some(NOW - 70)).state(&entry(
            "local",
            "2.0.0",
            Phase::Ready,
            progressing,
        )) else {
            panic!("late fails");
        };
        assert!(
            late.starts_with("not healthy within 60s (Progressing: "),
            "{late}"
        );
        let within = Some((HealthState::Progressing, NOW - 61));
        assert_eq!(
            judge(HealthMode::Wait, Some(NOW - 30)).state(&entry(
                "local",
                "2.0.0",
                Phase::Ready,
                within
            )),
            State::Moving,
            "the timeout counts from the move when that is later"
        );
        let not_written = judge(HealthMode::Wait, Some(NOW - 61));
        let State::Failed(never) = not_written.state(&entry("local", "1.0.0", Phase::Ready, None))
        else {
            panic!("never written fails");
        };
        assert_eq!(never, "not healthy within 60s (not written yet)");
    }

    /// A composition as listed: name, `move-to`, `move-clusters`, and its status entries.
    type Listed<'a> = (
        &'a str,
        Option<&'a str>,
        Option<&'a str>,
        Vec<ClusterStatus>,
    );

    fn use_of(compositions: &[Listed<'_>]) -> VersionUse {
        let mut used = VersionUse::default();
        for (name, move_to, move_clusters, entries) in compositions {
            used.compositions.insert(CompositionUse {
                namespace: "team".into(),
                name: name.to_string(),
                release: Some(name.to_string()),
                uid: format!("uid-{name}"),
                deleting: false,
                move_to: move_to.map(str::to_string),
                move_refused_by: None,
                paused: false,
                move_clusters: move_clusters.map(str::to_string),
            });
            used.releases
                .insert(("team".into(), name.to_string()), entries.clone());
        }
        used
    }

    /// Healthy on `chart`, on `cluster`.
    fn healthy(cluster: &str, chart: &str) -> ClusterStatus {
        let health = Some((HealthState::Healthy, NOW));
        entry(cluster, chart, Phase::Ready, health)
    }

    /// Compositions on v1 (one asked to move its `edge` release) and on v2 (one moved on `edge`
    /// only, one created there).
    fn two_versions() -> BTreeMap<String, VersionUse> {
        let old = |cluster: &str| healthy(cluster, "1.0.0");
        let new = |cluster: &str| healthy(cluster, "2.0.0");
        let both = || vec![old("local"), old("edge")];
        let v1 = use_of(&[
            ("waiting", None, None, both()),
            ("asked", Some("v2"), Some("v2:edge"), both()),
            ("unplaced", None, None, vec![]),
        ]);
        let v2 = use_of(&[
            (
                "half",
                None,
                Some("v2:edge"),
                vec![old("local"), new("edge")],
            ),
            ("born-here", None, None, vec![new("local")]),
        ]);
        BTreeMap::from([("v1".to_string(), v1), ("v2".to_string(), v2)])
    }

    #[test]
    fn releases_are_read_from_both_versions_and_each_cluster_judged_where_let_move() {
        let compositions = two_versions();
        let breaks = BTreeMap::from([("v1".to_string(), vec![]), ("v2".to_string(), vec![])]);
        let labels = BTreeMap::from([(
            "edge".to_string(),
            BTreeMap::from([("compositor.dev/wave".to_string(), "canary".to_string())]),
        )]);
        let selector: LabelSelector = serde_json::from_value(serde_json::json!({
            "matchLabels": {"compositor.dev/wave": "canary"}
        }))
        .unwrap();
        let waves = Waves {
            selectors: vec![Selector::try_from(selector).unwrap()],
            labels: &labels,
        };
        let wait = judge(HealthMode::Wait, Some(NOW - 10));
        let (found, unplaced) = releases(&compositions, &breaks, "v2", &wait, &waves, &[]);
        let seen: Vec<(String, &str, usize, State)> = found
            .iter()
            .map(|r| {
                (
                    r.composition.1.clone(),
                    r.cluster.as_str(),
                    r.wave,
                    r.state.clone(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("asked".into(), "local", 1, State::Waiting),
                ("asked".into(), "edge", 0, State::Moving),
                ("waiting".into(), "local", 1, State::Waiting),
                ("waiting".into(), "edge", 0, State::Waiting),
                ("half".into(), "local", 1, State::Waiting),
                ("half".into(), "edge", 0, State::Healthy),
            ]
        );
        let unplaced: Vec<&str> = unplaced.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(unplaced, ["unplaced"]);
        assert!(found.iter().all(|r| !r.excused));
        // Named as unhealthy before by the rollout's status: excused, wherever it is now.
        let before = [release_key(&("team".into(), "half".into()), "edge")];
        let (found, _) = releases(&compositions, &breaks, "v2", &wait, &waves, &before);
        let excused: Vec<_> = found.iter().filter(|r| r.excused).collect();
        assert_eq!(excused.len(), 1);
        assert_eq!(
            (
                excused[0].composition.1.as_str(),
                excused[0].cluster.as_str()
            ),
            ("half", "edge")
        );
    }

    #[test]
    fn a_release_failed_or_unhealthy_on_the_old_chart_was_unhealthy_before() {
        let wait = judge(HealthMode::Wait, Some(NOW - 10));
        let unhealthy = Some((HealthState::Unhealthy, NOW - 300));
        let healthy = Some((HealthState::Healthy, NOW - 300));
        assert!(wait.unhealthy_before(&entry("local", "1.0.0", Phase::Ready, unhealthy)));
        assert!(wait.unhealthy_before(&entry("local", "1.0.0", Phase::Failed, healthy)));
        assert!(!wait.unhealthy_before(&entry("local", "1.0.0", Phase::Ready, healthy)));
        assert!(
            !wait.unhealthy_before(&entry("local", "2.0.0", Phase::Ready, unhealthy)),
            "on the new chart, its health is the new version's"
        );
        let ignore = judge(HealthMode::Ignore, Some(NOW - 10));
        assert!(!ignore.unhealthy_before(&entry("local", "1.0.0", Phase::Ready, unhealthy)));
        assert!(ignore.unhealthy_before(&entry("local", "1.0.0", Phase::Failed, None)));
    }
}
