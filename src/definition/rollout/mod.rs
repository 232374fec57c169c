//! A new chart version reaching a definition's compositions in waves of releases, each gated by
//! the health of those before, and undone when one fails (`spec.rollout`).
//!
//! Everything a rollout knows is in the cluster, so an operator restarted mid-wave resumes
//! where it was: `status.rollout` holds its versions, phase and failures; each composition's
//! `compositor.dev/move-to` and `compositor.dev/move-clusters` annotations hold which of its
//! releases were let move; each release's entry in the composition's status holds the chart
//! version it runs and its health. A reconcile reads these, [`plan`] decides, and the asks are
//! written before the status, so a release is never let move twice.
//!
//! A failed rollout with `onFailure: Rollback` serves the version it came from again
//! ([`held_back`]) and every composition it moved returns there at once, its controller
//! upgrading each release back to the previous chart and values; the failed version is not
//! tried again until the definition asks for another or `compositor.dev/retry-rollout` changes.

mod plan;
mod releases;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::grants::{CompositionUse, VersionUse};
use super::moves::{self, Ask};
use super::{Context, Error};
use crate::api::{
    CompositionDefinition, FailedRelease, OnFailure, RETRY_ROLLOUT_ANNOTATION, RolloutPhase,
    RolloutStatus, clusters_moving_to, move_clusters_value,
};
use crate::crd::{Names, version_name};
use plan::{Decision, Pace, Release, State};
use releases::{Judge, Waves};

/// Most failed releases a status lists.
const FAILED_LIMIT: usize = 10;

/// The chart version to serve in place of `resolved`: the one a rollout to `resolved` failed
/// back to, until the definition asks for another or `compositor.dev/retry-rollout` changes.
pub(super) fn held_back(definition: &CompositionDefinition, resolved: &str) -> Option<String> {
    let rollout = definition.status.as_ref()?.rollout.as_ref()?;
    let held = rollout.phase == RolloutPhase::RolledBack
        && rollout.to == resolved
        && !retried(definition, rollout);
    held.then(|| rollout.from.clone())
}

/// Whether the retry annotation changed since `rollout` began.
fn retried(definition: &CompositionDefinition, rollout: &RolloutStatus) -> bool {
    definition.annotations().get(RETRY_ROLLOUT_ANNOTATION) != rollout.retry.as_ref()
}

/// What this reconcile's rollout does.
pub(super) struct Course {
    kind: Kind,
    /// The rollout to the version served, as last recorded.
    record: Option<RolloutStatus>,
    /// A complete rollout to another version, kept in the status until another begins.
    history: Option<RolloutStatus>,
}

enum Kind {
    /// Every movable composition moves at once: no rollout is under way.
    Free,
    /// Moving to the current version in waves (a new rollout when there is no record yet).
    Waves,
    /// Stopped on a failure; nothing moves.
    Halted,
    /// Failed and rolled back: every composition of the failed version (this CRD version)
    /// returns to the current one at once.
    Returning(String),
}

impl Course {
    /// The course of `definition` serving chart `serving`, `held` back from a failed version.
    pub(super) fn of(definition: &CompositionDefinition, serving: &str, held: bool) -> Course {
        let recorded = definition.status.as_ref().and_then(|s| s.rollout.clone());
        let course = |kind, record| Course {
            kind,
            record,
            history: None,
        };
        match recorded {
            Some(r) if r.to == serving => match r.phase {
                RolloutPhase::Progressing => course(Kind::Waves, Some(r)),
                RolloutPhase::Complete => course(Kind::Free, Some(r)),
                RolloutPhase::Halted if !retried(definition, &r) => course(Kind::Halted, Some(r)),
                // Tried again: from where it stands.
                RolloutPhase::Halted | RolloutPhase::RolledBack => course(
                    Kind::Waves,
                    Some(RolloutStatus {
                        phase: RolloutPhase::Progressing,
                        failed: Vec::new(),
                        retry: definition
                            .annotations()
                            .get(RETRY_ROLLOUT_ANNOTATION)
                            .cloned(),
                        last_move_time: None,
                        ..r
                    }),
                ),
            },
            Some(r) if held => match version_name(&r.to) {
                Ok(left) => course(Kind::Returning(left), Some(r)),
                Err(_) => course(Kind::Free, Some(r)),
            },
            // A failure of another version no longer holds anything back.
            Some(r) if r.phase.failed() => course(Kind::Waves, None),
            other => Course {
                kind: Kind::Waves,
                record: None,
                history: other.filter(|r| r.phase == RolloutPhase::Complete),
            },
        }
    }

    /// The version the rollout may return to, whose controller therefore stays.
    pub(super) fn keeps(&self) -> Option<String> {
        let record = self.record.as_ref()?;
        let under_way = match self.kind {
            Kind::Waves => record.phase == RolloutPhase::Progressing,
            Kind::Halted => true,
            Kind::Free | Kind::Returning(_) => false,
        };
        under_way.then(|| version_name(&record.from).ok()).flatten()
    }

    /// Whether versions nobody uses may be retired: not while a rollout may still return.
    pub(super) fn settled(&self) -> bool {
        self.keeps().is_none()
    }

    /// In a return, the compositions of the failed version move back whatever their schemas
    /// say: they came from the version they return to.
    pub(super) fn adjust_breaks(&self, breaks: &mut BTreeMap<String, Vec<String>>) {
        if let Kind::Returning(left) = &self.kind {
            breaks.insert(left.clone(), Vec::new());
        }
    }
}

/// What the rollout reads in a reconcile.
pub(super) struct Fleet<'a> {
    /// Its compositions, by version label.
    pub compositions: &'a BTreeMap<String, VersionUse>,
    /// The schema breaks from each version to the current one.
    pub breaks: &'a BTreeMap<String, Vec<String>>,
    /// The current CRD version and its chart version.
    pub current: (&'a str, &'a str),
    /// Every registered cluster's labels.
    pub cluster_labels: &'a BTreeMap<String, BTreeMap<String, String>>,
}

/// Moves the compositions as `course` says and returns the rollout to record, with whether
/// compositions are still on their way.
pub(super) async fn follow(
    course: Course,
    definition: &CompositionDefinition,
    context: &Context,
    names: &Names,
    fleet: Fleet<'_>,
) -> Result<(Option<RolloutStatus>, bool), Error> {
    match &course.kind {
        Kind::Free => all_at_once(context, names, &fleet, None, course.record).await,
        Kind::Returning(left) => {
            let left = left.clone();
            all_at_once(context, names, &fleet, Some(&left), course.record).await
        }
        Kind::Halted | Kind::Waves => waves(course, definition, context, names, fleet).await,
    }
}

/// Asks every movable composition to move at once (see [`every_movable`]), and returns
/// `record` with whether some are on their way.
async fn all_at_once(
    context: &Context,
    names: &Names,
    fleet: &Fleet<'_>,
    left: Option<&String>,
    record: Option<RolloutStatus>,
) -> Result<(Option<RolloutStatus>, bool), Error> {
    let (current, _) = fleet.current;
    moves::ask(&context.client, names, current, &every_movable(fleet, left)).await?;
    let moving = moves::movable(fleet.compositions, fleet.breaks, current)
        .next()
        .is_some();
    Ok((record, moving))
}

/// Today's move: every movable composition at once; a request to move to `left` (the version a
/// failed rollout leaves) is withdrawn, and rollout annotations that are done with go.
fn every_movable(fleet: &Fleet<'_>, left: Option<&String>) -> Vec<Ask> {
    let (current, _) = fleet.current;
    let movable: BTreeSet<(&str, &str)> = moves::movable(fleet.compositions, fleet.breaks, current)
        .map(|c| (c.namespace.as_str(), c.name.as_str()))
        .collect();
    let mut asks = Vec::new();
    for (version, used) in fleet.compositions {
        for composition in &used.compositions {
            let key = (composition.namespace.as_str(), composition.name.as_str());
            let withdrawn = left
                .is_some_and(|left| composition.move_to.as_ref() == Some(left) && version != left);
            let asked = if movable.contains(&key) {
                ask(composition, Some(current), None)
            } else if withdrawn {
                Ask {
                    move_to: Some(None),
                    ..ask(composition, None, None)
                }
            } else if version == current {
                ask(composition, None, None)
            } else {
                continue;
            };
            if asked.changes(composition) {
                asks.push(asked);
            }
        }
    }
    asks
}

fn ask(composition: &CompositionUse, to: Option<&str>, clusters: Option<String>) -> Ask {
    Ask {
        namespace: composition.namespace.clone(),
        name: composition.name.clone(),
        move_to: to.map(|to| Some(to.to_string())),
        clusters,
    }
}

/// One step of a rollout in waves: judge the releases, then move the next ones, or record that
/// it is complete or failed.
async fn waves(
    course: Course,
    definition: &CompositionDefinition,
    context: &Context,
    names: &Names,
    fleet: Fleet<'_>,
) -> Result<(Option<RolloutStatus>, bool), Error> {
    let now = Timestamp::now();
    let (found, unplaced) = read(definition, course.record.as_ref(), &fleet, now);
    let Some(mut record) = course.record.or_else(|| begin(definition, &fleet, &found)) else {
        // Nothing runs on an older version (or which one is not known): nothing to pace.
        return all_at_once(context, names, &fleet, None, course.history).await;
    };
    let (current, _) = fleet.current;
    let spec = &definition.spec.rollout;
    let total = found.len();
    let decision = match course.kind {
        Kind::Halted => Decision::Move(Vec::new()),
        _ => plan::decide(
            found.clone(),
            Pace {
                canary: spec.canary_of(total).unwrap_or(1),
                max_unavailable: spec.max_unavailable_of(total).unwrap_or(1),
            },
        ),
    };
    let mut asks: Vec<Ask> = unplaced
        .iter()
        .filter(|c| c.move_to.as_deref() != Some(current))
        .map(|c| ask(c, Some(current), None))
        .collect();
    let moved_now = step(&mut record, decision, definition, &fleet, now, &mut asks);
    moves::ask(&context.client, names, current, &asks).await?;
    let count = |counted: usize| u32::try_from(counted).unwrap_or(u32::MAX);
    let healthy = found.iter().filter(|r| r.state == State::Healthy);
    let moved = found.iter().filter(|r| r.state != State::Waiting);
    record.unhealthy_before = found
        .iter()
        .filter(|r| r.excused)
        .map(|r| releases::release_key(&r.composition, &r.cluster))
        .collect();
    record.total = count(total);
    record.healthy = count(healthy.count());
    record.moved = count(moved.count() + moved_now);
    let moving = match record.phase {
        RolloutPhase::Progressing | RolloutPhase::RolledBack => true,
        RolloutPhase::Complete => !asks.is_empty(),
        RolloutPhase::Halted => false,
    };
    Ok((Some(record), moving))
}

/// The releases of the rollout to the current version, judged at `now`, and the compositions
/// with none.
fn read<'a>(
    definition: &CompositionDefinition,
    record: Option<&RolloutStatus>,
    fleet: &Fleet<'a>,
    now: Timestamp,
) -> (Vec<Release>, Vec<&'a CompositionUse>) {
    let spec = &definition.spec.rollout;
    let (current, to_chart) = fleet.current;
    let judge = Judge {
        to_chart,
        health: definition.spec.health.mode,
        timeout_seconds: spec.health_timeout_seconds,
        last_move: record.and_then(|r| r.last_move_time.as_ref()).map(|t| t.0),
        now,
    };
    let selectors = spec
        .cluster_waves
        .iter()
        .filter_map(|wave| kube::core::Selector::try_from(wave.clone()).ok())
        .collect();
    let waves = Waves {
        selectors,
        labels: fleet.cluster_labels,
    };
    let unhealthy_before = record.map_or(&[][..], |r| &r.unhealthy_before);
    releases::releases(
        fleet.compositions,
        fleet.breaks,
        current,
        &judge,
        &waves,
        unhealthy_before,
    )
}

/// Records `decision` in `record` and adds the asks it takes to `asks`; how many releases it
/// lets move.
fn step(
    record: &mut RolloutStatus,
    decision: Decision,
    definition: &CompositionDefinition,
    fleet: &Fleet<'_>,
    now: Timestamp,
    asks: &mut Vec<Ask>,
) -> usize {
    let (current, _) = fleet.current;
    match decision {
        Decision::Complete => {
            record.phase = RolloutPhase::Complete;
            asks.extend(done_with(fleet.compositions, current));
            0
        }
        Decision::Failed(failed) => {
            record.phase = match definition.spec.rollout.on_failure {
                OnFailure::Rollback => RolloutPhase::RolledBack,
                OnFailure::Halt => RolloutPhase::Halted,
            };
            record.failed = failed.iter().take(FAILED_LIMIT).map(failure).collect();
            0
        }
        Decision::Move(next) => {
            asks.extend(let_move(fleet.compositions, current, &next));
            if !next.is_empty() {
                record.last_move_time = Some(Time(now));
            }
            next.len()
        }
    }
}

/// A new rollout, when releases run on an older version: from the chart version most of the
/// compositions to move are on.
fn begin(
    definition: &CompositionDefinition,
    fleet: &Fleet<'_>,
    found: &[Release],
) -> Option<RolloutStatus> {
    let (current, to_chart) = fleet.current;
    let moving: BTreeSet<(&str, &str)> = found
        .iter()
        .map(|r| (r.composition.0.as_str(), r.composition.1.as_str()))
        .collect();
    let (from_version, _) = fleet
        .compositions
        .iter()
        .filter(|(version, _)| *version != current)
        .map(|(version, used)| {
            let on = used
                .compositions
                .iter()
                .filter(|c| moving.contains(&(c.namespace.as_str(), c.name.as_str())));
            (version, on.count())
        })
        .filter(|(_, count)| *count > 0)
        .max_by_key(|(_, count)| *count)?;
    let versions = definition
        .status
        .as_ref()
        .map(|s| s.versions.as_slice())
        .unwrap_or_default();
    let from = versions.iter().find(|v| &v.version == from_version)?;
    Some(RolloutStatus {
        from: from.chart_version.clone(),
        to: to_chart.to_string(),
        phase: RolloutPhase::Progressing,
        moved: 0,
        healthy: 0,
        total: 0,
        failed: Vec::new(),
        unhealthy_before: Vec::new(),
        last_move_time: None,
        retry: definition
            .annotations()
            .get(RETRY_ROLLOUT_ANNOTATION)
            .cloned(),
    })
}

/// The asks that let `next` move: each composition's clusters so far, and these.
fn let_move(
    compositions: &BTreeMap<String, VersionUse>,
    current: &str,
    next: &[Release],
) -> Vec<Ask> {
    let mut by_composition: BTreeMap<&(String, String), Vec<&String>> = BTreeMap::new();
    for release in next {
        by_composition
            .entry(&release.composition)
            .or_default()
            .push(&release.cluster);
    }
    let mut asks = Vec::new();
    for (version, used) in compositions {
        for composition in &used.compositions {
            let key = (composition.namespace.clone(), composition.name.clone());
            let Some(clusters) = by_composition.get(&key) else {
                continue;
            };
            let mut allowed: BTreeSet<String> =
                clusters_moving_to(composition.move_clusters.as_deref(), current)
                    .unwrap_or_default();
            allowed.extend(clusters.iter().map(|c| c.to_string()));
            let to = (version != current).then_some(current);
            asks.push(ask(
                composition,
                to,
                Some(move_clusters_value(current, &allowed)),
            ));
        }
    }
    asks
}

/// A complete rollout's annotations going from the compositions it moved.
fn done_with(compositions: &BTreeMap<String, VersionUse>, current: &str) -> Vec<Ask> {
    compositions
        .get(current)
        .into_iter()
        .flat_map(|used| &used.compositions)
        .filter(|c| c.move_clusters.is_some())
        .map(|c| ask(c, None, None))
        .collect()
}

fn failure(release: &Release) -> FailedRelease {
    let reason = match &release.state {
        State::Failed(reason) => reason.clone(),
        other => format!("{other:?}"),
    };
    FailedRelease {
        composition: format!("{}/{}", release.composition.0, release.composition.1),
        cluster: release.cluster.clone(),
        reason,
    }
}

/// Why the definition is not Ready when its rollout stopped on a failure: the reason, and one
/// line naming the first failed release.
pub(super) fn stopped(rollout: Option<&RolloutStatus>) -> Option<(&'static str, String)> {
    let rollout = rollout.filter(|r| r.phase.failed())?;
    let (reason, what) = match rollout.phase {
        RolloutPhase::RolledBack => (
            "RolloutRolledBack",
            format!("rolled back to {}", rollout.from),
        ),
        _ => ("RolloutHalted", "halted".to_string()),
    };
    let first = rollout.failed.first().map_or_else(String::new, |f| {
        format!(": {} on {}: {}", f.composition, f.cluster, f.reason)
    });
    Some((
        reason,
        format!("chart {} → {} {what}{first}", rollout.from, rollout.to),
    ))
}
