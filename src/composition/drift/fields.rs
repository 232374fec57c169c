//! Which fields of a live object differ from what its release applies, and who changed them:
//! pure functions over JSON, so that every rule has a unit test.
//!
//! A field is compared only where the release applies it: what the release leaves out (status,
//! what controllers and defaulting add) is never drift. The object as the release would leave
//! it comes from a dry run of the release's apply, so the API server's defaulting is on both
//! sides.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

/// The field manager Helm applies with (server-side apply); a correction applies as it too, so
/// that ownership goes back to Helm.
pub const HELM_MANAGER: &str = "helm";

/// Metadata the API server keeps for itself: never drift.
const SERVER_METADATA: [&str; 6] = [
    "managedFields",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "uid",
    "selfLink",
];

/// JSON pointers of the fields where `live` differs from `applied` (the object as the release's
/// apply would leave it), leaving out status, server-kept metadata and the `ignored` pointers
/// (and everything below them).
pub fn drifted_paths(applied: &Value, live: &Value, ignored: &[String]) -> Vec<String> {
    let mut paths = Vec::new();
    compare(applied, live, String::new(), ignored, &mut paths);
    paths
}

fn compare(applied: &Value, live: &Value, path: String, ignored: &[String], out: &mut Vec<String>) {
    if is_ignored(&path, ignored) {
        return;
    }
    match (applied, live) {
        (Value::Object(applied), Value::Object(live)) => {
            let keys: BTreeSet<&String> = applied.keys().chain(live.keys()).collect();
            for key in keys {
                if path.is_empty() && key == "status" {
                    continue;
                }
                if path == "/metadata" && SERVER_METADATA.contains(&key.as_str()) {
                    continue;
                }
                let child = format!("{path}/{}", escape(key));
                let (a, l) = (applied.get(key.as_str()), live.get(key.as_str()));
                match (a, l) {
                    (Some(a), Some(l)) => compare(a, l, child, ignored, out),
                    (None, None) => {}
                    _ if is_ignored(&child, ignored) => {}
                    _ => out.push(child),
                }
            }
        }
        (Value::Array(a), Value::Array(l)) if a.len() == l.len() => {
            for (index, (a, l)) in a.iter().zip(l).enumerate() {
                compare(a, l, format!("{path}/{index}"), ignored, out);
            }
        }
        (a, l) if a == l => {}
        _ => out.push(path),
    }
}

/// Whether `path` is one of `ignored` or below one.
fn is_ignored(path: &str, ignored: &[String]) -> bool {
    ignored.iter().any(|pointer| {
        path == pointer
            || path
                .strip_prefix(pointer.as_str())
                .is_some_and(|rest| rest.starts_with('/'))
    })
}

/// A key as a JSON pointer segment (RFC 6901).
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn unescape(segment: &str) -> String {
    segment.replace("~1", "/").replace("~0", "~")
}

/// The field managers other than Helm that own one of `paths` of `live` (by its
/// `metadata.managedFields`), status writers left out. A path through a list is owned by a
/// manager that owns anything in that list, since list items are keyed by their content.
pub fn managers_of(live: &Value, paths: &[String]) -> BTreeSet<String> {
    let entries = live["metadata"]["managedFields"].as_array();
    let mut managers = BTreeSet::new();
    for entry in entries.into_iter().flatten() {
        let manager = entry["manager"].as_str().unwrap_or_default();
        if manager == HELM_MANAGER || entry["subresource"].as_str() == Some("status") {
            continue;
        }
        if paths.iter().any(|path| owns(&entry["fieldsV1"], path)) {
            managers.insert(manager.to_string());
        }
    }
    managers
}

/// Whether a `fieldsV1` set owns the field at JSON pointer `path`.
fn owns(fields: &Value, path: &str) -> bool {
    let mut node = fields;
    for segment in path.split('/').skip(1) {
        let Some(map) = node.as_object() else {
            return false;
        };
        if let Some(next) = map.get(&format!("f:{}", unescape(segment))) {
            node = next;
            continue;
        }
        // A list: its items are keyed (`k:`), by value (`v:`) or by index (`i:`).
        return map
            .keys()
            .any(|key| key.starts_with("k:") || key.starts_with("v:") || key.starts_with("i:"));
    }
    true
}

/// `applied` with each `ignored` pointer taken from `live` (or left out where `live` has none),
/// so that a correction never reverts what the definition says to leave alone. (A deleted
/// object comes back as rendered.)
pub fn keep_ignored(applied: &Value, live: &Value, ignored: &[String]) -> Value {
    let mut applied = applied.clone();
    for pointer in ignored {
        let value = live.pointer(pointer).cloned();
        set_pointer(&mut applied, pointer, value);
    }
    applied
}

/// Sets (or, with `None`, removes) the field at `pointer`, making the objects above it.
fn set_pointer(root: &mut Value, pointer: &str, value: Option<Value>) {
    let segments: Vec<String> = pointer.split('/').skip(1).map(unescape).collect();
    let Some((last, parents)) = segments.split_last() else {
        return;
    };
    let mut node = root;
    for segment in parents {
        let Value::Object(map) = node else { return };
        if value.is_none() && !map.contains_key(segment) {
            return;
        }
        node = map
            .entry(segment.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if let Value::Object(map) = node {
        match value {
            Some(value) => {
                map.insert(last.clone(), value);
            }
            None => {
                map.remove(last);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn live() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": "web", "resourceVersion": "9", "generation": 4,
                "labels": {"app": "web"},
                "annotations": {"deployment.kubernetes.io/revision": "2"},
                "managedFields": [
                    {"manager": "helm", "operation": "Apply",
                     "fieldsV1": {"f:spec": {"f:template": {}}}},
                    {"manager": "kubectl-scale", "operation": "Update",
                     "fieldsV1": {"f:spec": {"f:replicas": {}}}},
                    {"manager": "kube-controller-manager", "operation": "Update",
                     "subresource": "status", "fieldsV1": {"f:status": {"f:replicas": {}}}},
                    {"manager": "editor", "operation": "Update",
                     "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {
                         "k:{\"name\":\"web\"}": {"f:image": {}}}}}}}},
                ],
            },
            "spec": {"replicas": 0, "template": {"spec": {"containers": [{"name": "web", "image": "web:2"}]}}},
            "status": {"replicas": 0},
        })
    }

    fn applied() -> Value {
        let mut applied = live();
        applied["metadata"]["resourceVersion"] = json!("10");
        applied["metadata"]["managedFields"] = json!([]);
        applied["spec"]["replicas"] = json!(3);
        applied["spec"]["template"]["spec"]["containers"][0]["image"] = json!("web:1");
        applied["status"] = json!({"replicas": 3});
        applied
    }

    #[test]
    fn only_what_the_apply_would_change_is_drift() {
        let paths = drifted_paths(&applied(), &live(), &[]);
        assert_eq!(
            paths,
            ["/spec/replicas", "/spec/template/spec/containers/0/image"]
        );
        assert!(drifted_paths(&live(), &live(), &[]).is_empty());
    }

    #[test]
    fn a_removed_or_added_field_is_drift() {
        let mut applied = live();
        applied["metadata"]["labels"]["tier"] = json!("front");
        let paths = drifted_paths(&applied, &live(), &[]);
        assert_eq!(paths, ["/metadata/labels/tier"]);
        let paths = drifted_paths(&live(), &applied, &[]);
        assert_eq!(paths, ["/metadata/labels/tier"]);
    }

    #[test]
    fn ignored_paths_and_what_is_below_them_are_never_drift() {
        let ignored = ["/spec/replicas".to_string(), "/spec/template".to_string()];
        assert!(drifted_paths(&applied(), &live(), &ignored).is_empty());
        let ignored = ["/spec/rep".to_string()];
        assert_eq!(drifted_paths(&applied(), &live(), &ignored).len(), 2);
    }

    #[test]
    fn the_managers_that_own_a_drifted_path_are_named_but_not_helm_or_status_writers() {
        let paths = drifted_paths(&applied(), &live(), &[]);
        let managers = managers_of(&live(), &paths);
        assert_eq!(
            managers,
            ["editor".to_string(), "kubectl-scale".to_string()].into()
        );
        let managers = managers_of(&live(), &["/metadata/labels/app".to_string()]);
        assert!(managers.is_empty(), "nobody but Helm owns it: {managers:?}");
    }

    #[test]
    fn ignored_fields_keep_their_live_value_in_a_correction() {
        let ignored = [
            "/spec/replicas".to_string(),
            "/metadata/labels/gone".to_string(),
        ];
        let mut applied = applied();
        applied["metadata"]["labels"]["gone"] = json!("x");
        let kept = keep_ignored(&applied, &live(), &ignored);
        assert_eq!(kept["spec"]["replicas"], 0);
        assert!(kept["metadata"]["labels"].get("gone").is_none());
        assert_eq!(kept["spec"]["template"], applied["spec"]["template"]);
    }

    #[test]
    fn pointer_segments_are_escaped() {
        let applied = json!({"metadata": {"annotations": {"a/b": "1"}}});
        let live = json!({"metadata": {"annotations": {"a/b": "2"}}});
        assert_eq!(
            drifted_paths(&applied, &live, &[]),
            ["/metadata/annotations/a~1b"]
        );
    }
}
