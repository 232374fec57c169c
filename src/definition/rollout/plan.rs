//! The rollout's choice, from what the releases report: which releases move next, or that the
//! rollout failed or is complete. Pure, so every wave is tested without a cluster.
//!
//! A release that was unhealthy before it moved (a tenant's own values keep it so) says nothing
//! of the new version: it moves last, once every other release is healthy, and its health
//! there does not decide the rollout, so one broken tenant does not hold back the fleet.

/// One release in a rollout: a composition on one cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    /// Namespace and name of the composition.
    pub composition: (String, String),
    /// The cluster of the release.
    pub cluster: String,
    /// The cluster wave it belongs to (the index of the first `clusterWaves` selector its
    /// cluster matches; past the last one when none does).
    pub wave: usize,
    /// Where it is.
    pub state: State,
    /// Unhealthy before it moved: it moves last, and does not fail the rollout.
    pub excused: bool,
}

/// Where a release is in the rollout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// Still on the previous version, not asked to move.
    Waiting,
    /// Asked to move, not healthy on the new version yet.
    Moving,
    /// Healthy on the new version.
    Healthy,
    /// Failed on the new version, and why.
    Failed(String),
}

/// What the rollout does next.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// Every release is healthy on the new version.
    Complete,
    /// These releases failed: nothing else moves.
    Failed(Vec<Release>),
    /// These releases move now (none: wait for those moving).
    Move(Vec<Release>),
}

/// How many releases move at once.
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    /// Releases moved first, alone.
    pub canary: usize,
    /// After the canary, at most this many moving or not healthy at once.
    pub max_unavailable: usize,
}

/// The next step of a rollout over `releases` at `pace`. Releases move in order of their
/// cluster wave, then composition, then cluster: the canary first, alone, until it is healthy;
/// then the releases of the first wave not yet healthy, never more than `max_unavailable`
/// moving at once; a wave starts once the one before is healthy.
pub fn decide(mut releases: Vec<Release>, pace: Pace) -> Decision {
    let failed: Vec<Release> = releases
        .iter()
        .filter(|r| matches!(r.state, State::Failed(_)) && !r.excused)
        .cloned()
        .collect();
    if !failed.is_empty() {
        return Decision::Failed(failed);
    }
    releases.sort_by(|a, b| {
        let key = |r: &Release| (r.excused, r.wave, r.composition.clone(), r.cluster.clone());
        key(a).cmp(&key(b))
    });
    let settled = |r: &Release| match r.state {
        State::Healthy => true,
        State::Failed(_) => r.excused,
        State::Waiting | State::Moving => false,
    };
    if releases.iter().all(settled) {
        return Decision::Complete;
    }
    let count = |state: &State| releases.iter().filter(|r| &r.state == state).count();
    let (waiting, healthy) = (count(&State::Waiting), count(&State::Healthy));
    let moved = releases.len() - waiting;
    let canary = pace.canary.min(releases.len());
    if healthy < canary && releases.iter().any(|r| !r.excused && !settled(r)) {
        let room = canary.saturating_sub(moved);
        return Decision::Move(first_waiting(&releases, room, |r| !r.excused));
    }
    let room = pace.max_unavailable.saturating_sub(count(&State::Moving));
    // The first wave not healthy yet; the excused releases are the last wave of all.
    let wave = releases
        .iter()
        .filter(|r| !settled(r))
        .map(|r| (r.excused, r.wave))
        .min()
        .unwrap_or_default();
    Decision::Move(first_waiting(&releases, room, |r| {
        (r.excused, r.wave) == wave
    }))
}

/// The first `room` waiting releases that `fits`.
fn first_waiting(
    releases: &[Release],
    room: usize,
    fits: impl Fn(&Release) -> bool,
) -> Vec<Release> {
    releases
        .iter()
        .filter(|r| r.state == State::Waiting && fits(r))
        .take(room)
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release(name: &str, cluster: &str, wave: usize, state: State) -> Release {
        Release {
            composition: ("team".into(), name.into()),
            cluster: cluster.into(),
            wave,
            state,
            excused: false,
        }
    }

    fn fleet(states: &[State]) -> Vec<Release> {
        states
            .iter()
            .enumerate()
            .map(|(i, state)| release(&format!("app-{i}"), "local", 0, state.clone()))
            .collect()
    }

    fn moved(decision: Decision) -> Vec<String> {
        match decision {
            Decision::Move(releases) => releases
                .into_iter()
                .map(|r| format!("{}@{}", r.composition.1, r.cluster))
                .collect(),
            other => panic!("expected moves, got {other:?}"),
        }
    }

    const PACE: Pace = Pace {
        canary: 1,
        max_unavailable: 2,
    };

    #[test]
    fn the_canary_moves_alone_until_it_is_healthy() {
        use State::*;
        let start = fleet(&[Waiting, Waiting, Waiting, Waiting, Waiting, Waiting]);
        assert_eq!(moved(decide(start, PACE)), ["app-0@local"]);
        let canary_moving = fleet(&[Moving, Waiting, Waiting, Waiting, Waiting, Waiting]);
        assert!(moved(decide(canary_moving, PACE)).is_empty());
        let canary_healthy = fleet(&[Healthy, Waiting, Waiting, Waiting, Waiting, Waiting]);
        assert_eq!(
            moved(decide(canary_healthy, PACE)),
            ["app-1@local", "app-2@local"]
        );
    }

    #[test]
    fn never_more_than_max_unavailable_move_at_once() {
        use State::*;
        let one_moving = fleet(&[Healthy, Moving, Healthy, Waiting, Waiting, Waiting]);
        assert_eq!(moved(decide(one_moving, PACE)), ["app-3@local"]);
        let two_moving = fleet(&[Healthy, Moving, Moving, Waiting, Waiting, Waiting]);
        assert!(moved(decide(two_moving, PACE)).is_empty());
        let all = Pace {
            canary: 0,
            max_unavailable: 6,
        };
        let start = fleet(&[Waiting, Waiting, Waiting, Waiting, Waiting, Waiting]);
        assert_eq!(
            moved(decide(start, all)).len(),
            6,
            "canary 0 and 100%: all at once"
        );
    }

    #[test]
    fn a_failed_release_stops_every_move_and_all_healthy_completes() {
        use State::*;
        let failing = fleet(&[Failed("Unhealthy: crash".into()), Waiting, Waiting]);
        let Decision::Failed(failed) = decide(failing, PACE) else {
            panic!("a failure is the decision");
        };
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].state, Failed("Unhealthy: crash".into()));
        assert_eq!(decide(fleet(&[Healthy, Healthy]), PACE), Decision::Complete);
        assert_eq!(decide(Vec::new(), PACE), Decision::Complete);
    }

    #[test]
    fn a_wave_starts_once_the_one_before_is_healthy() {
        use State::*;
        let pace = Pace {
            canary: 1,
            max_unavailable: 4,
        };
        // The canary cluster is wave 0; `west` matches no selector.
        let releases = |states: [State; 4]| {
            let [a, b, c, d] = states;
            vec![
                release("t1", "west", 1, a),
                release("t1", "canary", 0, b),
                release("t2", "west", 1, c),
                release("t2", "canary", 0, d),
            ]
        };
        let start = releases([Waiting, Waiting, Waiting, Waiting]);
        assert_eq!(moved(decide(start, pace)), ["t1@canary"]);
        let canary_healthy = releases([Waiting, Healthy, Waiting, Waiting]);
        assert_eq!(moved(decide(canary_healthy, pace)), ["t2@canary"]);
        let first_wave_moving = releases([Waiting, Healthy, Waiting, Moving]);
        assert!(
            moved(decide(first_wave_moving, pace)).is_empty(),
            "west waits for the canary cluster"
        );
        let first_wave_healthy = releases([Waiting, Healthy, Waiting, Healthy]);
        assert_eq!(
            moved(decide(first_wave_healthy, pace)),
            ["t1@west", "t2@west"]
        );
    }

    #[test]
    fn a_canary_larger_than_the_fleet_is_the_fleet() {
        use State::*;
        let pace = Pace {
            canary: 10,
            max_unavailable: 1,
        };
        assert_eq!(moved(decide(fleet(&[Waiting, Waiting]), pace)).len(), 2);
        assert_eq!(decide(fleet(&[Healthy, Healthy]), pace), Decision::Complete);
    }

    #[test]
    fn a_release_unhealthy_before_it_moved_moves_last_and_does_not_fail_the_rollout() {
        use State::*;
        let excused = |name: &str, state: State| Release {
            excused: true,
            ..release(name, "local", 0, state)
        };
        let fleet = |sick: State, a: State, b: State| {
            vec![
                excused("app-0", sick),
                release("app-1", "local", 0, a),
                release("app-2", "local", 0, b),
            ]
        };
        // Sorted first by name, it is still not the canary.
        let start = fleet(Waiting, Waiting, Waiting);
        assert_eq!(moved(decide(start, PACE)), ["app-1@local"]);
        let others_moving = fleet(Waiting, Healthy, Moving);
        assert!(moved(decide(others_moving, PACE)).is_empty());
        let others_healthy = fleet(Waiting, Healthy, Healthy);
        assert_eq!(moved(decide(others_healthy, PACE)), ["app-0@local"]);
        let still_sick = fleet(Failed("Unhealthy: crash".into()), Healthy, Healthy);
        assert_eq!(decide(still_sick, PACE), Decision::Complete);
        let sick_moving = fleet(Moving, Healthy, Healthy);
        assert!(moved(decide(sick_moving, PACE)).is_empty());
        // A release healthy before that fails still fails the rollout.
        let failing = fleet(Waiting, Failed("Unhealthy: crash".into()), Waiting);
        assert!(matches!(decide(failing, PACE), Decision::Failed(f) if f.len() == 1));
        // Only excused releases: nothing to learn, they move within maxUnavailable.
        let only_sick = vec![
            excused("a", Waiting),
            excused("b", Waiting),
            excused("c", Waiting),
        ];
        assert_eq!(moved(decide(only_sick, PACE)).len(), 2);
    }
}
