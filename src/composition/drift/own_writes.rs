//! The controller's own corrections, told apart from drift. A correction takes fields back, so
//! who owns what changes and its watch event would look like drift: one more reconcile that
//! looks again and finds nothing. A correction is announced before its apply
//! ([`OwnWrites::begin`]) and the version it wrote recorded after ([`OwnWrites::end`]); the
//! watch event of that version is then no change, whichever of the two arrives first, and any
//! other event of the object meanwhile is still told.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// An object on a cluster: (cluster, UID).
type ObjectOnCluster = (String, String);

/// How long a written version waits for its event; a watch that relisted meanwhile shows the
/// object as it is, and a signature it already knows is no change anyway.
const EVENT_WAIT: Duration = Duration::from_secs(60);

/// The corrections in flight and the versions they wrote, with the events (`T`) held back
/// meanwhile.
pub(super) struct OwnWrites<T> {
    objects: Mutex<HashMap<ObjectOnCluster, State<T>>>,
}

enum State<T> {
    /// The apply runs; the events seen meanwhile, each with its version.
    Applying(Vec<(String, T)>),
    /// The apply wrote this version, whose event has not come yet; since when.
    Wrote(String, Instant),
}

impl<T> Default for OwnWrites<T> {
    fn default() -> Self {
        OwnWrites {
            objects: Mutex::default(),
        }
    }
}

impl<T> OwnWrites<T> {
    /// A correction of object `uid` on `cluster` is about to be applied.
    pub(super) fn begin(&self, cluster: &str, uid: &str) {
        let key = (cluster.to_string(), uid.to_string());
        self.lock().insert(key, State::Applying(Vec::new()));
    }

    /// The correction wrote `version` (`None`: it failed). The events held back meanwhile
    /// that were not of it, to be told now.
    pub(super) fn end(&self, cluster: &str, uid: &str, version: Option<&str>) -> Vec<T> {
        let key = (cluster.to_string(), uid.to_string());
        let mut objects = self.lock();
        objects.retain(|_, state| match state {
            State::Wrote(_, since) => since.elapsed() < EVENT_WAIT,
            State::Applying(_) => true,
        });
        let held = match objects.remove(&key) {
            Some(State::Applying(held)) => held,
            _ => Vec::new(),
        };
        let Some(version) = version else {
            return held.into_iter().map(|(_, event)| event).collect();
        };
        let seen = held.iter().any(|(held, _)| held == version);
        if !seen {
            objects.insert(key, State::Wrote(version.to_string(), Instant::now()));
        }
        held.into_iter()
            .filter(|(held, _)| held != version)
            .map(|(_, event)| event)
            .collect()
    }

    /// `event`, of object `uid` at `version` on `cluster`, when it is to be told now: not when
    /// it is the correction's own write, nor while a correction of the object is applied.
    pub(super) fn filter(&self, cluster: &str, uid: &str, version: &str, event: T) -> Option<T> {
        let key = (cluster.to_string(), uid.to_string());
        let mut objects = self.lock();
        match objects.get_mut(&key) {
            Some(State::Applying(held)) => {
                held.push((version.to_string(), event));
                None
            }
            Some(State::Wrote(written, _)) if written == version => {
                objects.remove(&key);
                None
            }
            _ => Some(event),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectOnCluster, State<T>>> {
        self.objects
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_event_of_a_correction_is_no_change_whenever_it_comes() {
        let writes = OwnWrites::default();
        writes.begin("local", "u1");
        assert_eq!(writes.end("local", "u1", Some("7")), Vec::<&str>::new());
        assert_eq!(writes.filter("local", "u1", "7", "own"), None);
        assert_eq!(
            writes.filter("local", "u1", "8", "later"),
            Some("later"),
            "only once"
        );

        writes.begin("local", "u1");
        assert_eq!(writes.filter("local", "u1", "9", "own, early"), None);
        assert_eq!(writes.end("local", "u1", Some("9")), Vec::<&str>::new());
        assert_eq!(writes.filter("local", "u1", "10", "next"), Some("next"));
    }

    #[test]
    fn another_writers_event_meanwhile_is_still_told() {
        let writes = OwnWrites::default();
        writes.begin("local", "u1");
        assert_eq!(writes.filter("local", "u1", "5", "theirs"), None);
        assert_eq!(writes.end("local", "u1", Some("6")), vec!["theirs"]);
        assert_eq!(writes.filter("local", "u1", "6", "own"), None);
        assert_eq!(
            writes.filter("remote", "u1", "6", "elsewhere"),
            Some("elsewhere")
        );

        writes.begin("local", "u2");
        assert_eq!(writes.filter("local", "u2", "3", "held"), None);
        assert_eq!(
            writes.end("local", "u2", None),
            vec!["held"],
            "a failed correction holds nothing back"
        );
        assert_eq!(writes.filter("local", "u2", "4", "after"), Some("after"));
    }
}
