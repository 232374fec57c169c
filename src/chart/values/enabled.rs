//! Which subcharts a chart's values enable: a dependency's `tags`, then its `condition`.

use serde_json::{Map, Value};

use crate::chart::Dependency;

/// The key of the table of tags in a chart's values.
pub const TAGS: &str = "tags";

/// Whether `dependency` takes part, given the chart's coalesced `values` and the `tags` in
/// effect. Like Helm: a tag set to true enables it, tags only set to false disable it, and
/// the first condition path holding a boolean overrides the tags.
pub fn is_enabled(dependency: &Dependency, values: &Map<String, Value>, tags: &Value) -> bool {
    let by_tags = enabled_by_tags(dependency, tags);
    let condition = dependency.condition.as_deref().unwrap_or_default();
    // Helm trims the whole condition, not each path in it.
    condition
        .trim()
        .split(',')
        .filter(|path| !path.is_empty())
        .find_map(|path| match path_value(values, path) {
            Some(Value::Bool(enabled)) => Some(*enabled),
            _ => None,
        })
        .unwrap_or(by_tags)
}

fn enabled_by_tags(dependency: &Dependency, tags: &Value) -> bool {
    let Value::Object(tags) = tags else {
        return true;
    };
    let set: Vec<bool> = dependency
        .tags
        .iter()
        .filter_map(|tag| tags.get(tag).and_then(Value::as_bool))
        .collect();
    set.contains(&true) || set.is_empty()
}

/// The value at dotted `path`, if it is not a table (Helm's `PathValue`).
fn path_value<'a>(values: &'a Map<String, Value>, path: &str) -> Option<&'a Value> {
    let (tables, key) = match path.rsplit_once('.') {
        Some((tables, key)) => (Some(tables), key),
        None => (None, path),
    };
    let table = match tables {
        Some(tables) => table_at(values, tables)?,
        None => values,
    };
    table.get(key).filter(|value| !value.is_object())
}

/// The table at dotted `path` (Helm's `Table`).
pub fn table_at<'a>(values: &'a Map<String, Value>, path: &str) -> Option<&'a Map<String, Value>> {
    path.split('.')
        .try_fold(values, |table, key| table.get(key)?.as_object())
}
