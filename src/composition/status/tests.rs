use std::time::Duration;

use super::*;
use crate::api::{LOCAL_CLUSTER, ReleaseHealth, find_condition};
use crate::composition::HelmStep;

fn types(status: &CompositionStatus) -> Vec<(&str, &str, &str)> {
    status
        .conditions
        .iter()
        .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
        .collect()
}

#[test]
fn outcomes_follow_kstatus() {
    let mut status = CompositionStatus::default();
    let transient = Err(Error::DefinitionNotReady("team/app".into()));
    record_outcome(&mut status, &[], &transient, Some(3));
    assert_eq!(
        types(&status),
        [
            ("Ready", "False", "DefinitionNotReady"),
            ("Reconciling", "True", "Retrying")
        ]
    );
    assert_eq!(status.observed_generation, None, "a retry is still due");

    let terminal = Err(Error::InvalidValues("/replicas: not an integer".into()));
    record_outcome(&mut status, &[], &terminal, Some(4));
    assert_eq!(
        types(&status),
        [
            ("Ready", "False", "InvalidValues"),
            ("Stalled", "True", "InvalidValues")
        ]
    );
    assert_eq!(status.observed_generation, Some(4));
    assert_eq!(status.phase, Some(Phase::Failed));

    record_outcome(
        &mut status,
        &[Phase::Ready],
        &Ok(Action::await_change()),
        Some(5),
    );
    assert_eq!(
        types(&status),
        [
            ("Ready", "True", "Ready"),
            ("Installed", "True", "Installed")
        ]
    );
    assert_eq!(status.observed_generation, Some(5));
    assert_eq!(status.phase, Some(Phase::Ready));
}

#[test]
fn one_target_gives_the_composition_its_phase() {
    for phase in [Phase::Ready, Phase::Failed, Phase::Progressing] {
        assert_eq!(summarize([phase]), phase);
    }
}

#[test]
fn any_failed_target_fails_the_composition_and_all_ready_make_it_ready() {
    use Phase::{Failed, Progressing, Ready};
    assert_eq!(summarize([Ready, Ready]), Ready);
    assert_eq!(summarize([Ready, Progressing]), Progressing);
    assert_eq!(summarize([Progressing, Failed, Ready]), Failed);
    assert_eq!(summarize([Ready, Failed]), Failed);
}

#[test]
fn a_failed_reconcile_fails_the_composition_whatever_its_targets() {
    let failed = Err(Error::Helm(HelmStep::Upgrade, crate::helm::Error::NotFound));
    for targets in [&[][..], &[Phase::Failed], &[Phase::Ready]] {
        let mut status = CompositionStatus::default();
        record_outcome(&mut status, targets, &failed, Some(1));
        assert_eq!(status.phase, Some(Phase::Failed), "{targets:?}");
    }
}

fn entry(name: &str, phase: Phase, revision: i64) -> ClusterStatus {
    ClusterStatus {
        revision: Some(revision),
        ..ClusterStatus::new(name, "team", "app", phase)
    }
}

#[test]
fn a_cluster_entry_keeps_its_transition_time_while_its_phase_holds() {
    let entry = |phase, revision| entry(LOCAL_CLUSTER, phase, revision);
    let mut status = CompositionStatus::default();
    record_cluster(&mut status, entry(Phase::Ready, 1));
    let first = status.clusters[0].last_transition_time.clone();
    assert!(first.is_some());
    std::thread::sleep(Duration::from_millis(5));
    record_cluster(&mut status, entry(Phase::Ready, 2));
    assert_eq!(status.clusters.len(), 1);
    assert_eq!(status.clusters[0].revision, Some(2));
    assert_eq!(status.clusters[0].last_transition_time, first);
    record_cluster(&mut status, entry(Phase::Failed, 2));
    assert_ne!(status.clusters[0].last_transition_time, first);
}

#[test]
fn ready_follows_the_health_of_every_cluster_naming_the_first_not_healthy() {
    let health = |state, message: &str| ReleaseHealth {
        state,
        message: message.into(),
        since: None,
    };
    let on = |states: [Option<ReleaseHealth>; 2]| {
        let mut status = CompositionStatus {
            phase: Some(Phase::Ready),
            ..CompositionStatus::default()
        };
        for (name, health) in ["a", "b"].into_iter().zip(states) {
            let entry = ClusterStatus {
                health,
                ..entry(name, Phase::Ready, 1)
            };
            status.clusters.push(entry);
        }
        record_health(&mut status, Some(1));
        status
    };
    let message = |status: &CompositionStatus| {
        let ready = find_condition(&status.conditions, READY).unwrap();
        ready.message.clone()
    };
    let healthy = Some(health(HealthState::Healthy, ""));
    let status = on([healthy.clone(), None]);
    assert_eq!(types(&status), [("Ready", "True", "Ready")]);
    assert_eq!(status.phase, Some(Phase::Ready));

    let waits = Some(health(
        HealthState::Progressing,
        "Deployment t/web: 0/2 available",
    ));
    let status = on([healthy.clone(), waits.clone()]);
    assert_eq!(
        types(&status),
        [
            ("Ready", "False", "Progressing"),
            ("Reconciling", "True", "Progressing")
        ]
    );
    assert_eq!(
        message(&status),
        "cluster b: Deployment t/web: 0/2 available"
    );
    assert_eq!(status.phase, Some(Phase::Progressing));

    let failed = Some(health(
        HealthState::Unhealthy,
        "Job t/migrate: BackoffLimitExceeded",
    ));
    let status = on([waits, failed]);
    assert_eq!(types(&status), [("Ready", "False", "Unhealthy")]);
    assert_eq!(
        message(&status),
        "cluster b: Job t/migrate: BackoffLimitExceeded"
    );
    assert_eq!(status.phase, Some(Phase::Failed));
}
