//! A chart's values as Helm gives them to its templates and checks them against its schemas.
//!
//! Helm does not stop at laying the given values over the chart's values.yaml. It first
//! decides which subcharts take part (`condition` and `tags`), copies their `import-values`
//! into the parent's defaults, then coalesces every taking-part subchart's own values.yaml
//! under its key (its alias when it has one), with the parent's `global` table copied into
//! it. A `null` deletes the default it lands on. [`coalesced`] does all of that, so that what
//! compositor validates and what it derives an API from are what Helm will see
//! (`tests/helm_values.rs` compares the two with the real `helm`).
//!
//! Two corners of Helm are not reproduced: Helm shares the tables inside a parent's `global`
//! with its subcharts, so what a subchart's values.yaml sets under `global.<a>.<b>` leaks into
//! the parent's `global`; and the conditions of a subchart's own dependencies are read here from values
//! where those dependencies sit under their aliases, where Helm's first pass has them under
//! their names.

mod enabled;
mod imports;
mod tables;

#[cfg(test)]
mod tests;

use serde_json::{Map, Value};

use super::version::{VersionSpec, parse_version};
use super::{Dependency, Package};
use enabled::{TAGS, is_enabled};
use tables::{Child, Node, Nulls, coalesce_chart, coalesce_tables};

pub use tables::GLOBAL;

/// Which subcharts take part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enabling {
    /// Those the values enable through `condition` and `tags`, as Helm decides.
    ByValues,
    /// Every one, whatever the values say: what a chart's API must allow for.
    Every,
}

/// A chart's values as Helm sees them.
#[derive(Clone, Debug, PartialEq)]
pub struct Coalesced {
    /// The chart's values, with each taking-part subchart's under its key.
    pub values: Value,
    /// The subcharts that take part.
    pub subcharts: Vec<Subchart>,
}

/// A subchart that takes part, with those of its own that do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subchart {
    /// The key of its values in its parent's.
    pub key: String,
    /// Its position among its parent package's `subcharts`.
    pub index: usize,
    /// Its own subcharts that take part.
    pub subcharts: Vec<Subchart>,
}

/// The values Helm gives `package`'s templates when it is installed with `values`.
pub fn coalesced(package: &Package, values: &Value, enabling: Enabling) -> Coalesced {
    laid_over(package, values, enabling, Nulls::Delete)
}

/// The values every install of `package` starts from, with every subchart taking part and the
/// `null`s of its values.yaml files kept (Helm's merge): a `null` default says that a value
/// may be `null`.
pub fn defaults(package: &Package) -> Value {
    let nothing = Value::Object(Map::new());
    laid_over(package, &nothing, Enabling::Every, Nulls::Keep).values
}

/// `values` laid over `package`'s defaults, with `nulls` acting as Helm's coalesce or merge.
fn laid_over(package: &Package, values: &Value, enabling: Enabling, nulls: Nulls) -> Coalesced {
    let given = values.as_object().cloned().unwrap_or_default();
    let chart = resolve(package, &given, given.get(TAGS), enabling);
    let mut values = given;
    coalesce_chart(&chart, &mut values, nulls);
    Coalesced {
        values: Value::Object(values),
        subcharts: taking_part(&chart),
    }
}

/// The chart as Helm installs it with `values` (this chart's, as its parent hands them down):
/// the subcharts that take part, and its defaults with their imports.
fn resolve(
    package: &Package,
    values: &Map<String, Value>,
    tags: Option<&Value>,
    enabling: Enabling,
) -> Node {
    // Helm processes no dependency of a chart that declares none: every subchart takes part,
    // under its name, as it is.
    if package.metadata.dependencies.is_empty() {
        return as_packaged(package);
    }
    let mut coalesced = values.clone();
    coalesce_chart(&with_keys(package), &mut coalesced, Nulls::Delete);
    let tags = tags_in_effect(tags, &package.values);
    // Helm leaves out every subchart under the key of a dependency it disables.
    let left_out: Vec<&str> = match enabling {
        Enabling::Every => Vec::new(),
        Enabling::ByValues => package
            .metadata
            .dependencies
            .iter()
            .filter(|dependency| !is_enabled(dependency, &coalesced, &tags))
            .map(Dependency::values_key)
            .collect(),
    };
    let children = instances(package)
        .into_iter()
        .filter(|instance| !left_out.contains(&instance.key))
        .map(|instance| {
            let below = coalesced.get(instance.key).and_then(Value::as_object);
            let node = resolve(
                &package.subcharts[instance.index],
                &below.cloned().unwrap_or_default(),
                (!tags.is_null()).then_some(&tags),
                enabling,
            );
            Child {
                key: instance.key.to_owned(),
                index: instance.index,
                node,
            }
        })
        .collect();
    let mut chart = Node {
        values: package.values.as_object().cloned().unwrap_or_default(),
        children,
    };
    let importing: Vec<&Dependency> = package
        .metadata
        .dependencies
        .iter()
        .filter(|dependency| !left_out.contains(&dependency.values_key()))
        .collect();
    // Helm rewrites a chart's defaults only while one of its dependencies is enabled.
    if !importing.is_empty() {
        chart.values = with_imports(&chart, importing);
    }
    chart
}

/// The chart's defaults as Helm leaves them after importing: each taking-part subchart's
/// merged under its key, and the imports beneath what the chart sets itself.
fn with_imports(chart: &Node, dependencies: Vec<&Dependency>) -> Map<String, Value> {
    let mut merged = Map::new();
    coalesce_chart(chart, &mut merged, Nulls::Keep);
    let imported = imports::imported(dependencies, &merged);
    coalesce_tables(&mut merged, imported, Nulls::Keep);
    merged
}

/// The `tags` a chart's dependencies see: those from above over the chart's own (`null` for
/// none).
fn tags_in_effect(above: Option<&Value>, values: &Value) -> Value {
    match (above, values.get(TAGS)) {
        (Some(Value::Object(above)), Some(Value::Object(own))) => {
            let mut tags = above.clone();
            coalesce_tables(&mut tags, own.clone(), Nulls::Delete);
            Value::Object(tags)
        }
        (Some(above), _) => above.clone(),
        (None, own) => own.cloned().unwrap_or(Value::Null),
    }
}

/// A subchart as its parent's dependencies place it.
struct Instance<'a> {
    key: &'a str,
    index: usize,
}

/// Every place a subchart takes in its parent: first those no dependency names, under their
/// names, then one per dependency that names one, under its alias or name (a chart can be
/// aliased twice).
fn instances(package: &Package) -> Vec<Instance<'_>> {
    let dependencies = &package.metadata.dependencies;
    let undeclared = package
        .subcharts
        .iter()
        .enumerate()
        .filter(|(_, sub)| !dependencies.iter().any(|d| names(d, sub)))
        .map(|(index, sub)| Instance {
            key: &sub.metadata.name,
            index,
        });
    let declared = dependencies.iter().filter_map(|dependency| {
        let index = package
            .subcharts
            .iter()
            .position(|sub| names(dependency, sub))?;
        Some(Instance {
            key: dependency.values_key(),
            index,
        })
    });
    undeclared.chain(declared).collect()
}

/// Whether `dependency` names `sub`: the same name, and a version its range accepts. As in
/// Helm, a dependency without a version names no packaged chart (its alias is not applied).
fn names(dependency: &Dependency, sub: &Package) -> bool {
    let range = dependency
        .version
        .as_deref()
        .map(str::trim)
        .unwrap_or_default();
    let accepts = match (
        VersionSpec::parse(range),
        parse_version(&sub.metadata.version),
    ) {
        (Ok(spec), Some(version)) => !range.is_empty() && spec.matches(&version),
        _ => false,
    };
    dependency.name == sub.metadata.name && accepts
}

/// The chart with every subchart in place under its key, each below as it is packaged: what
/// Helm coalesces to evaluate the chart's conditions.
fn with_keys(package: &Package) -> Node {
    let children = instances(package)
        .into_iter()
        .map(|instance| Child {
            key: instance.key.to_owned(),
            index: instance.index,
            node: as_packaged(&package.subcharts[instance.index]),
        })
        .collect();
    Node {
        values: package.values.as_object().cloned().unwrap_or_default(),
        children,
    }
}

/// The chart and its subcharts as packaged: each under its own name, none left out.
fn as_packaged(package: &Package) -> Node {
    let children = package
        .subcharts
        .iter()
        .enumerate()
        .map(|(index, sub)| Child {
            key: sub.metadata.name.clone(),
            index,
            node: as_packaged(sub),
        })
        .collect();
    Node {
        values: package.values.as_object().cloned().unwrap_or_default(),
        children,
    }
}

fn taking_part(chart: &Node) -> Vec<Subchart> {
    chart
        .children
        .iter()
        .map(|child| Subchart {
            key: child.key.clone(),
            index: child.index,
            subcharts: taking_part(&child.node),
        })
        .collect()
}
