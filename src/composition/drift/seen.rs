//! What a drift watch keeps of each object it sees, and which of its events are changes: a
//! change of who owns which fields (apart from status writes), or a deletion. A new object, a
//! status write or a new time of the same owner is none.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher::Event;

/// What a watch keeps of an object: who it is, whose release, and the hash of who owns which
/// of its fields ([`signature`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Seen {
    pub uid: String,
    /// Its resourceVersion when seen.
    pub version: String,
    pub name: String,
    pub namespace: Option<String>,
    /// (namespace, name) of its release, by Helm's annotations.
    pub release: Option<(String, String)>,
    signature: u64,
}

impl Seen {
    fn of(metadata: &ObjectMeta) -> Seen {
        Seen {
            uid: metadata.uid.clone().unwrap_or_default(),
            version: metadata.resource_version.clone().unwrap_or_default(),
            name: metadata.name.clone().unwrap_or_default(),
            namespace: metadata.namespace.clone(),
            release: crate::helm::release_of(metadata.annotations.as_ref()),
            signature: signature(metadata),
        }
    }
}

/// An object as last seen, found by its UID. Boxed: a watch across a cluster keeps one for each
/// object of its kind there, and its table then holds a pointer per slot.
struct Known(Box<Seen>);

impl Borrow<str> for Known {
    fn borrow(&self) -> &str {
        &self.0.uid
    }
}

impl PartialEq for Known {
    fn eq(&self, other: &Known) -> bool {
        self.0.uid == other.0.uid
    }
}

impl Eq for Known {}

impl Hash for Known {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.uid.as_str().hash(state);
    }
}

/// What a watch last saw of each object, by UID, so that only a change of who owns what is
/// told: not status writes, not a new time of the same owner.
#[derive(Default)]
pub(super) struct Signatures {
    known: HashSet<Known>,
    /// The UIDs a relist has seen so far.
    relisted: Option<HashSet<String>>,
}

impl Signatures {
    /// The objects `event` shows changed (or gone) since they were last seen. A new object is
    /// not a change; one missing from a relist is gone.
    pub(super) fn changes(&mut self, event: Event<ObjectMeta>) -> Vec<Seen> {
        match event {
            Event::Init => {
                self.relisted = Some(HashSet::new());
                Vec::new()
            }
            Event::InitApply(object) => {
                let uid = object.uid.clone().unwrap_or_default();
                if let Some(relisted) = &mut self.relisted {
                    relisted.insert(uid);
                }
                self.applied(&object).into_iter().collect()
            }
            Event::InitDone => {
                let relisted = self.relisted.take().unwrap_or_default();
                let (kept, gone): (HashSet<Known>, HashSet<Known>) =
                    std::mem::take(&mut self.known)
                        .into_iter()
                        .partition(|known| relisted.contains(&known.0.uid));
                self.known = kept;
                gone.into_iter().map(|known| *known.0).collect()
            }
            Event::Apply(object) => self.applied(&object).into_iter().collect(),
            Event::Delete(object) => {
                let uid = object.uid.clone().unwrap_or_default();
                self.known.remove(uid.as_str());
                vec![Seen::of(&object)]
            }
        }
    }

    fn applied(&mut self, object: &ObjectMeta) -> Option<Seen> {
        let seen = Seen::of(object);
        let before = self.known.replace(Known(Box::new(seen.clone())));
        before
            .is_some_and(|before| before.0.signature != seen.signature)
            .then_some(seen)
    }
}

/// Who owns which fields of `object`, apart from status writes, and whether it is being
/// deleted.
fn signature(metadata: &ObjectMeta) -> u64 {
    let mut hasher = DefaultHasher::new();
    metadata.deletion_timestamp.is_some().hash(&mut hasher);
    for entry in metadata.managed_fields.iter().flatten() {
        if entry.subresource.as_deref() == Some("status") {
            continue;
        }
        entry.manager.hash(&mut hasher);
        entry.operation.hash(&mut hasher);
        let fields = entry.fields_v1.as_ref().map(|f| f.0.to_string());
        fields.hash(&mut hasher);
    }
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(uid: &str, managers: serde_json::Value) -> ObjectMeta {
        serde_json::from_value(json!({
            "name": format!("cm-{uid}"), "namespace": "team", "uid": uid,
            "managedFields": managers,
        }))
        .unwrap()
    }

    fn helm_only() -> serde_json::Value {
        json!([{"manager": "helm", "operation": "Apply", "time": "2026-01-01T00:00:00Z",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:k": {}}}}])
    }

    #[test]
    fn only_a_change_of_who_owns_what_or_a_deletion_is_told() {
        let mut seen = Signatures::default();
        assert!(seen.changes(Event::Init).is_empty());
        assert!(
            seen.changes(Event::InitApply(object("u1", helm_only())))
                .is_empty()
        );
        assert!(seen.changes(Event::InitDone).is_empty());

        let mut status_written = helm_only();
        status_written.as_array_mut().unwrap().push(json!({
            "manager": "kubelet", "operation": "Update", "subresource": "status",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}));
        status_written[0]["time"] = json!("2026-02-02T00:00:00Z");
        let quiet = seen.changes(Event::Apply(object("u1", status_written)));
        assert!(
            quiet.is_empty(),
            "a status write or a new time is no change"
        );

        let edited = json!([
            {"manager": "helm", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {}},
            {"manager": "kubectl-edit", "operation": "Update", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:data": {"f:k": {}}}}]);
        assert_eq!(seen.changes(Event::Apply(object("u1", edited))).len(), 1);
        assert!(
            seen.changes(Event::Apply(object("u2", helm_only())))
                .is_empty(),
            "a new object is not a change"
        );
        assert_eq!(
            seen.changes(Event::Delete(object("u2", helm_only()))).len(),
            1
        );
    }

    #[test]
    fn an_object_a_relist_no_longer_shows_was_deleted() {
        let mut seen = Signatures::default();
        seen.changes(Event::Init);
        seen.changes(Event::InitApply(object("u1", helm_only())));
        seen.changes(Event::InitApply(object("u2", helm_only())));
        seen.changes(Event::InitDone);
        seen.changes(Event::Init);
        seen.changes(Event::InitApply(object("u1", helm_only())));
        let gone = seen.changes(Event::InitDone);
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].name, "cm-u2");
    }
}
