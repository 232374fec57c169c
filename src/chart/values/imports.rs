//! A dependency's `import-values`: tables of a subchart's values copied into its parent's
//! defaults, beneath what the parent sets itself.

use serde_json::{Map, Value};

use super::enabled::table_at;
use super::tables::{Nulls, coalesce_tables};
use crate::chart::{Dependency, ImportValues};

/// What `dependencies` import, as one table to lay beneath the parent's defaults. `merged` is
/// the parent's defaults with each subchart's under its key. An earlier import wins over a
/// later one, and a table that is missing imports nothing, as in Helm.
pub fn imported<'a>(
    dependencies: impl IntoIterator<Item = &'a Dependency>,
    merged: &Map<String, Value>,
) -> Map<String, Value> {
    let mut out = Map::new();
    for dependency in dependencies {
        let key = dependency.values_key();
        for import in &dependency.import_values {
            let (child, parent) = match import {
                ImportValues::Exports(name) => (format!("exports.{name}"), "."),
                ImportValues::Path { child, parent } => (child.clone(), parent.as_str()),
                ImportValues::Other(_) => continue,
            };
            let Some(table) = table_at(merged, &format!("{key}.{child}")) else {
                continue;
            };
            coalesce_tables(&mut out, at_path(parent, table.clone()), Nulls::Keep);
        }
    }
    out
}

/// `table` nested under dotted `path`; `.` is the root.
fn at_path(path: &str, table: Map<String, Value>) -> Map<String, Value> {
    if path == "." {
        return table;
    }
    path.split('.').rev().fold(table, |inner, key| {
        Map::from_iter([(key.to_owned(), Value::Object(inner))])
    })
}
