//! Events against the test bed's API server: a repeat is counted in the first event's series, a
//! new note is an event of its own, and a repeat of an event the server no longer has starts
//! anew.

mod support;

use compositor::runtime::events::{EventType, Recorder, Reporter};
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Resource, ResourceExt};

/// The events about `object`, oldest first: (note, series count).
async fn events_about(events: &Api<Event>, object: &ObjectReference) -> Vec<(String, i32)> {
    let uid = object.uid.clone().unwrap_or_default();
    let mut found: Vec<Event> = events
        .list(&ListParams::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|event| event.regarding.as_ref().and_then(|r| r.uid.clone()) == Some(uid.clone()))
        .collect();
    found.sort_by_key(|event| event.event_time.clone().map(|t| t.0));
    found
        .into_iter()
        .map(|event| {
            let count = event.series.map_or(1, |series| series.count);
            (event.note.unwrap_or_default(), count)
        })
        .collect()
}

#[tokio::test]
async fn repeats_are_counted_in_one_event_and_a_new_note_is_a_new_event() {
    let client = support::client().await;
    let namespace = support::namespace(&client, "events").await;
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), &namespace);
    let mut object = ConfigMap::default();
    object.metadata.name = Some("subject".into());
    let object = config_maps
        .create(&PostParams::default(), &object)
        .await
        .expect("create the subject");
    let reference = object.object_ref(&());
    let events = Api::<Event>::namespaced(client.clone(), &namespace);
    let reporter = Reporter {
        controller: "compositor-events-test".into(),
        instance: None,
    };
    let recorder = Recorder::new(client.clone(), reporter);

    for _ in 0..3 {
        recorder
            .publish(&reference, EventType::Warning, "InstallFailed", "timed out")
            .await;
    }
    recorder
        .publish(&reference, EventType::Warning, "InstallFailed", "denied")
        .await;
    assert_eq!(
        events_about(&events, &reference).await,
        [("timed out".to_string(), 3), ("denied".to_string(), 1)]
    );

    let first = events
        .list(&ListParams::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .find(|event| event.note.as_deref() == Some("timed out"))
        .expect("the first event");
    events
        .delete(&first.name_any(), &DeleteParams::default())
        .await
        .expect("delete the first event");
    recorder
        .publish(&reference, EventType::Warning, "InstallFailed", "timed out")
        .await;
    assert_eq!(
        events_about(&events, &reference).await,
        [("denied".to_string(), 1), ("timed out".to_string(), 1)]
    );
}
