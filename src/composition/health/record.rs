//! What a release's health becomes in its status: the verdict of its objects, held against the
//! definition's timeout, which counts from the last Helm write or from when the release was
//! last healthy.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::Verdict;
use crate::api::{ClusterStatus, HealthState, ReleaseHealth};

/// The health to record of a release whose objects say `verdict`, after `recorded`; `released`
/// when Helm has just written it, which starts the `timeout` again.
pub(in crate::composition) fn of_release(
    verdict: Verdict,
    recorded: Option<&ReleaseHealth>,
    released: bool,
    timeout: Duration,
) -> ReleaseHealth {
    let (state, message) = match verdict {
        Verdict::Healthy => {
            return ReleaseHealth {
                state: HealthState::Healthy,
                message: String::new(),
                since: None,
            };
        }
        Verdict::Progressing(message) => (HealthState::Progressing, message),
        Verdict::Unhealthy(message) => (HealthState::Unhealthy, message),
    };
    let kept = recorded.filter(|_| !released).and_then(|r| r.since.clone());
    let since = kept.unwrap_or_else(|| Time(Timestamp::now()));
    let late = elapsed(&since) > timeout;
    match (state, late) {
        (HealthState::Progressing, true) => ReleaseHealth {
            state: HealthState::Unhealthy,
            message: format!("not healthy within {}s: {message}", timeout.as_secs()),
            since: Some(since),
        },
        _ => ReleaseHealth {
            state,
            message,
            since: Some(since),
        },
    }
}

/// The health of a release on a cluster that does not answer: not known, never guessed from
/// what was last seen.
pub(in crate::composition) fn unknown() -> ReleaseHealth {
    ReleaseHealth {
        state: HealthState::Unknown,
        message: "the cluster does not answer: how the release is doing is not known".into(),
        since: None,
    }
}

/// How long until a Progressing `health` is past `timeout`, when it is Progressing.
pub(in crate::composition) fn due_in(
    health: &ReleaseHealth,
    timeout: Duration,
) -> Option<Duration> {
    let since = health.since.as_ref()?;
    (health.state == HealthState::Progressing)
        .then(|| timeout.saturating_sub(elapsed(since)) + Duration::from_secs(1))
}

/// The entry to record of a target (`entry`, or none when the `recorded` one stands) with its
/// `health`.
pub(in crate::composition) fn with_health(
    entry: Option<ClusterStatus>,
    recorded: Option<&ClusterStatus>,
    health: Option<ReleaseHealth>,
) -> Option<ClusterStatus> {
    if entry.is_none() && recorded.map(|r| &r.health) == Some(&health) {
        return None;
    }
    let entry = entry.or_else(|| recorded.cloned())?;
    Some(ClusterStatus { health, ..entry })
}

fn elapsed(since: &Time) -> Duration {
    let seconds = Timestamp::now().as_second() - since.0.as_second();
    Duration::from_secs(u64::try_from(seconds).unwrap_or_default())
}
