//! Values merged as Helm merges the files given with `--values`: maps key by key, anything
//! else (a list, a scalar, null) replaced by what comes later.

use serde_json::{Map, Value};

/// Merges `over` onto `base`.
pub(super) fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(base), Value::Object(over)) => {
            for (key, value) in over {
                match base.get_mut(&key) {
                    Some(existing) => merge(existing, value),
                    None => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (base, over) => *base = over,
    }
}

/// `value` at `path` (keys from the top), in maps made on the way.
pub(super) fn at_path(path: &[String], value: Value) -> Value {
    path.iter().rev().fold(value, |inner, key| {
        Value::Object(Map::from_iter([(key.clone(), inner)]))
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn maps_merge_key_by_key_and_the_rest_is_replaced() {
        let mut values = json!({"image": {"repository": "app", "tag": "1"}, "ports": [80],
                                "debug": true});
        merge(
            &mut values,
            json!({"image": {"tag": "2"}, "ports": [443], "debug": null, "extra": {"a": 1}}),
        );
        assert_eq!(
            values,
            json!({"image": {"repository": "app", "tag": "2"}, "ports": [443], "debug": null,
                   "extra": {"a": 1}})
        );
        merge(&mut values, json!({"image": "flat"}));
        assert_eq!(values["image"], "flat");
    }

    #[test]
    fn a_value_at_a_path_is_nested_in_maps() {
        let path = ["db".to_string(), "auth.password".to_string()];
        assert_eq!(
            at_path(&path, json!("s3cret")),
            json!({"db": {"auth.password": "s3cret"}})
        );
        assert_eq!(at_path(&[], json!({"a": 1})), json!({"a": 1}));
    }
}
