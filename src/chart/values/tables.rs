//! Helm's rules for laying values over a chart's defaults, table by table.
//!
//! Helm has two modes: coalescing (what an install does with the values it is given: a `null`
//! deletes the default under it) and merging (what it does while importing subchart values:
//! `null`s are kept for a later coalesce to act on). Objects merge key by key, anything else
//! is replaced, and the side laid on top always wins.

use serde_json::{Map, Value};

/// The key whose table Helm copies from a chart into each of its subcharts.
pub const GLOBAL: &str = "global";

/// What a `null` laid over a default does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nulls {
    /// The `null` deletes the default and itself (Helm's coalesce).
    Delete,
    /// The `null` stays, for a later coalesce (Helm's merge).
    Keep,
}

/// A chart as the coalesce walks it: its defaults and the subcharts that take part, each under
/// the key of its values.
#[derive(Clone, Debug, Default)]
pub struct Node {
    /// The chart's defaults at this stage.
    pub values: Map<String, Value>,
    /// The subcharts that take part, each with the key of its values and the index of its
    /// package among the chart's `subcharts`.
    pub children: Vec<Child>,
}

/// A subchart under its values key.
#[derive(Clone, Debug)]
pub struct Child {
    /// The key of its values in the parent's: its alias, else its name.
    pub key: String,
    /// Its position among the parent package's `subcharts`.
    pub index: usize,
    /// The subchart itself.
    pub node: Node,
}

impl Node {
    fn has_child(&self, key: &str) -> bool {
        self.children.iter().any(|child| child.key == key)
    }
}

/// Lays `chart`'s defaults, and those of every subchart under its key, beneath `dest`.
pub fn coalesce_chart(chart: &Node, dest: &mut Map<String, Value>, nulls: Nulls) {
    coalesce_defaults(chart, dest, nulls);
    coalesce_children(chart, dest, nulls);
}

/// Lays the chart's own defaults beneath `dest`.
fn coalesce_defaults(chart: &Node, dest: &mut Map<String, Value>, nulls: Nulls) {
    for (key, default) in &chart.values {
        match dest.get_mut(key) {
            Some(Value::Null) if nulls == Nulls::Delete => {
                dest.remove(key);
            }
            Some(Value::Object(over)) => {
                let Value::Object(default) = default else {
                    continue;
                };
                // A subchart's table keeps its nulls until the subchart's own defaults are
                // coalesced under it, so that they delete those.
                let nulls = if chart.has_child(key) {
                    Nulls::Keep
                } else {
                    nulls
                };
                coalesce_tables(over, without_nulls(default, nulls), nulls);
            }
            Some(_) => {}
            None if default.is_null() && nulls == Nulls::Delete => {}
            None => {
                let default = match default {
                    Value::Object(table) => Value::Object(without_nulls(table, nulls)),
                    other => other.clone(),
                };
                dest.insert(key.clone(), default);
            }
        }
    }
}

/// Coalesces each subchart under its key, after copying the chart's `global` table into it.
fn coalesce_children(chart: &Node, dest: &mut Map<String, Value>, nulls: Nulls) {
    for child in &chart.children {
        let globals = dest.get(GLOBAL).cloned();
        let entry = dest
            .entry(child.key.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        // Helm refuses such values; validation reports them.
        let Value::Object(values) = entry else {
            continue;
        };
        coalesce_globals(values, globals.as_ref());
        coalesce_chart(&child.node, values, nulls);
    }
}

/// Copies the parent's `global` table into a subchart's values: the parent's entries win, the
/// subchart's fill in. A `global` that is not a table on either side is left alone.
fn coalesce_globals(values: &mut Map<String, Value>, parent: Option<&Value>) {
    let mut globals = match values.get(GLOBAL) {
        None => Map::new(),
        Some(Value::Object(table)) => table.clone(),
        Some(_) => return,
    };
    let parent = match parent {
        None => &Map::new(),
        Some(Value::Object(table)) => table,
        Some(_) => return,
    };
    for (key, value) in parent {
        match (value, globals.get(key)) {
            (Value::Object(table), None) => {
                globals.insert(key.clone(), Value::Object(table.clone()));
            }
            (Value::Object(table), Some(Value::Object(own))) => {
                let mut merged = table.clone();
                coalesce_tables(&mut merged, own.clone(), Nulls::Keep);
                globals.insert(key.clone(), Value::Object(merged));
            }
            (Value::Object(_), Some(_)) | (_, Some(Value::Object(_))) => {}
            (value, _) => {
                globals.insert(key.clone(), value.clone());
            }
        }
    }
    values.insert(GLOBAL.to_owned(), Value::Object(globals));
}

/// Lays `src` beneath `dst`: `dst` wins, tables merge, and a `null` in `dst` over a value of
/// `src` deletes both when coalescing.
pub fn coalesce_tables(dst: &mut Map<String, Value>, src: Map<String, Value>, nulls: Nulls) {
    for (key, value) in src {
        match dst.get_mut(&key) {
            None => {
                dst.insert(key, value);
            }
            Some(Value::Null) => {
                if nulls == Nulls::Delete && !value.is_null() {
                    dst.remove(&key);
                }
            }
            Some(Value::Object(over)) => {
                if let Value::Object(under) = value {
                    coalesce_tables(over, under, nulls);
                }
            }
            Some(_) => {}
        }
    }
}

/// `table` without its `null`s at any depth when coalescing (a chart's own `null` defaults
/// would otherwise show through), as it is when merging.
fn without_nulls(table: &Map<String, Value>, nulls: Nulls) -> Map<String, Value> {
    let mut table = table.clone();
    if nulls == Nulls::Delete {
        remove_nulls(&mut table);
    }
    table
}

/// Removes every `null` from `table`, at any depth.
pub fn remove_nulls(table: &mut Map<String, Value>) {
    table.retain(|_, value| !value.is_null());
    for value in table.values_mut() {
        if let Value::Object(inner) = value {
            remove_nulls(inner);
        }
    }
}
