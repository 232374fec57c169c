//! Kubernetes events about the objects a controller serves, as `kubectl describe` shows them.
//!
//! The same event again (same object, type, reason and note) within [`SERIES_GAP`] of the last
//! one is counted in the first one's series instead of being created anew, so that a failure
//! retried for hours is one event, not hundreds. To find that first event, only a hash of the
//! event and its name's timestamp are kept, not the event: kube's own recorder keeps whole
//! events, which with thousands of compositions was the largest part of a controller's memory.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
pub use kube::runtime::events::{EventType, Reporter};

/// How long after an event its repeat still counts in its series.
const SERIES_GAP: SignedDuration = SignedDuration::from_mins(6);
/// The longest note Kubernetes keeps.
const NOTE_MAX: usize = 1000;
/// What every event is said to be about.
const ACTION: &str = "Reconcile";

/// Publishes events as one controller (its [`Reporter`]).
pub struct Recorder {
    client: Client,
    reporter: Reporter,
    series: Mutex<HashMap<u64, Series>>,
}

/// What is kept of a published event: enough to name it and count its repeats.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Series {
    /// When it was first published: its name's suffix.
    first: Timestamp,
    /// How often it happened, the first included.
    count: i32,
    /// When it last happened.
    last: Timestamp,
}

/// What a publish does: create an event, or count a repeat in an existing one.
#[derive(Debug, PartialEq)]
enum Publish {
    Create(Series),
    Repeat(Series),
}

impl Recorder {
    /// A recorder publishing with `client` as `reporter`.
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Recorder {
            client,
            reporter,
            series: Mutex::default(),
        }
    }

    /// Publishes an event about `object` with `note` (cut to the 1,000 characters Kubernetes
    /// keeps). A failure is logged: an event is never worth failing a reconcile for.
    pub async fn publish(
        &self,
        object: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: &str,
    ) {
        let note: String = note.chars().take(NOTE_MAX).collect();
        let key = key_of(object, type_, reason, &note);
        let step = self.next(key, Timestamp::now());
        let namespace = object.namespace.as_deref().unwrap_or("default");
        let events = Api::<Event>::namespaced(self.client.clone(), namespace);
        let result = match step {
            Publish::Create(series) => {
                let event = self.event(object, type_, reason, note, series.first);
                events
                    .create(&PostParams::default(), &event)
                    .await
                    .map(drop)
            }
            Publish::Repeat(series) => {
                let name = event_name(object, &self.reporter, series.first);
                let patch = serde_json::json!({"series": {
                    "count": series.count,
                    "lastObservedTime": MicroTime(series.last),
                }});
                let patched = events
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
                match patched {
                    // The first event has expired on the server: this one starts anew.
                    Err(kube::Error::Api(status)) if status.code == 404 => {
                        let first = Timestamp::now();
                        self.started(key, first);
                        let event = self.event(object, type_, reason, note, first);
                        events
                            .create(&PostParams::default(), &event)
                            .await
                            .map(drop)
                    }
                    other => other.map(drop),
                }
            }
        };
        if let Err(error) = result {
            tracing::warn!(%error, "cannot publish event");
        }
    }

    /// Whether the event of `key`, at `now`, is new or a repeat, with its series counted; and
    /// forgets the series whose last event is older than [`SERIES_GAP`].
    fn next(&self, key: u64, now: Timestamp) -> Publish {
        let mut series = self.lock();
        series.retain(|_, kept| kept.last + SERIES_GAP > now);
        match series.get_mut(&key) {
            Some(kept) => {
                kept.count += 1;
                kept.last = now;
                Publish::Repeat(*kept)
            }
            None => {
                let started = Series {
                    first: now,
                    count: 1,
                    last: now,
                };
                series.insert(key, started);
                Publish::Create(started)
            }
        }
    }

    /// Records that the event of `key` starts a new series at `first`.
    fn started(&self, key: u64, first: Timestamp) {
        let series = Series {
            first,
            count: 1,
            last: first,
        };
        self.lock().insert(key, series);
    }

    fn event(
        &self,
        object: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
        first: Timestamp,
    ) -> Event {
        let controller = &self.reporter.controller;
        Event {
            metadata: ObjectMeta {
                name: Some(event_name(object, &self.reporter, first)),
                namespace: object.namespace.clone(),
                ..ObjectMeta::default()
            },
            action: Some(ACTION.into()),
            reason: Some(reason.into()),
            note: Some(note),
            type_: Some(type_name(type_).into()),
            event_time: Some(MicroTime(first)),
            regarding: Some(object.clone()),
            reporting_controller: Some(controller.clone()),
            reporting_instance: Some(self.reporter.instance.clone().unwrap_or(controller.clone())),
            ..Event::default()
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Series>> {
        self.series
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// An event's identity: the object it is about, its type, reason and note.
fn key_of(object: &ObjectReference, type_: EventType, reason: &str, note: &str) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (&object.uid, &object.namespace, &object.name, &object.kind).hash(&mut hasher);
    (&object.api_version, type_name(type_), reason, note).hash(&mut hasher);
    hasher.finish()
}

/// The name of the event about `object` first published at `first`: unique per object and
/// time, as Kubernetes' own recorders name them.
fn event_name(object: &ObjectReference, reporter: &Reporter, first: Timestamp) -> String {
    let name = object.name.as_deref().unwrap_or(&reporter.controller);
    format!("{name}.{:x}", first.as_nanosecond())
}

fn type_name(type_: EventType) -> &'static str {
    match type_ {
        EventType::Normal => "Normal",
        EventType::Warning => "Warning",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorder() -> Recorder {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let reporter = Reporter {
            controller: "compositor-test".into(),
            instance: None,
        };
        Recorder::new(Client::try_from(config).unwrap(), reporter)
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    #[tokio::test]
    async fn a_repeat_within_the_gap_counts_in_the_first_events_series() {
        let recorder = recorder();
        let first = recorder.next(7, at(0));
        assert_eq!(
            first,
            Publish::Create(Series {
                first: at(0),
                count: 1,
                last: at(0)
            })
        );
        let again = recorder.next(7, at(300));
        assert_eq!(
            again,
            Publish::Repeat(Series {
                first: at(0),
                count: 2,
                last: at(300)
            })
        );
        // Six minutes after the last repeat, not the first event, the series is over.
        assert!(matches!(recorder.next(7, at(600)), Publish::Repeat(s) if s.count == 3));
        assert_eq!(
            recorder.next(7, at(600 + 361)),
            Publish::Create(Series {
                first: at(961),
                count: 1,
                last: at(961)
            })
        );
        assert!(matches!(recorder.next(8, at(961)), Publish::Create(_)));
    }

    #[tokio::test]
    async fn only_series_still_open_are_kept() {
        let recorder = recorder();
        for key in 0..1000 {
            recorder.next(key, at(0));
        }
        recorder.next(5000, at(361));
        assert_eq!(recorder.lock().len(), 1);
    }

    #[test]
    fn another_note_is_another_event_and_names_are_per_object_and_time() {
        let object = ObjectReference {
            name: Some("app".into()),
            namespace: Some("team".into()),
            uid: Some("u1".into()),
            ..ObjectReference::default()
        };
        let failed = key_of(&object, EventType::Warning, "InstallFailed", "timeout");
        assert_eq!(
            failed,
            key_of(&object, EventType::Warning, "InstallFailed", "timeout")
        );
        assert_ne!(
            failed,
            key_of(&object, EventType::Warning, "InstallFailed", "denied")
        );
        let other = ObjectReference {
            uid: Some("u2".into()),
            ..object.clone()
        };
        assert_ne!(
            failed,
            key_of(&other, EventType::Warning, "InstallFailed", "timeout")
        );
        let reporter = Reporter {
            controller: "c".into(),
            instance: None,
        };
        assert_eq!(
            event_name(&object, &reporter, at(0)),
            format!("app.{:x}", at(0).as_nanosecond())
        );
    }
}
