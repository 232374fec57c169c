use serde_json::{Value, json};

use super::*;

/// One row of `cases.json`: an object of `apiVersion` and `kind` (its spec, status and
/// metadata in `object`), the verdict it must get, and words its message must hold.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Case {
    api_version: String,
    kind: String,
    object: Value,
    health: String,
    says: String,
}

#[test]
fn every_kind_is_judged_as_the_table_says() {
    let cases: Vec<Case> = serde_json::from_str(include_str!("cases.json")).unwrap();
    for case in cases {
        let mut object = json!({"apiVersion": case.api_version, "kind": case.kind,
                                "metadata": {"name": "x"}});
        for (key, value) in case.object.as_object().unwrap() {
            object[key] = value.clone();
        }
        let object: DynamicObject = serde_json::from_value(object).unwrap();
        let (health, message) = match judge(&object) {
            Health::Current => ("Current", String::new()),
            Health::InProgress(why) => ("InProgress", why),
            Health::Failed(why) => ("Failed", why),
        };
        let row = format!("{} {}", case.kind, case.object);
        assert_eq!(health, case.health, "{row}: {message}");
        assert!(
            message.contains(&case.says),
            "{row}: {message:?} lacks {:?}",
            case.says
        );
    }
}
