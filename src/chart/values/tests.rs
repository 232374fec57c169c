//! One test per rule of Helm's coalescing; `tests/helm_values.rs` checks the same rules against
//! the real `helm`.

use serde_json::{Value, json};

use super::*;
use crate::chart::Dependency;

/// A chart named `name` with `values`, the dependencies of Chart.yaml (as YAML) and subcharts.
fn chart(name: &str, values: Value, dependencies: &str, subcharts: Vec<Package>) -> Package {
    let mut dependencies: Vec<Dependency> = if dependencies.is_empty() {
        Vec::new()
    } else {
        serde_saphyr::from_str(dependencies).expect("dependencies")
    };
    // Every test chart is version 1.0.0; a dependency names a chart only with a version.
    for dependency in &mut dependencies {
        dependency.version.get_or_insert_with(|| "1.0.0".to_owned());
    }
    let mut package = Package::bare(name, values);
    package.metadata.dependencies = dependencies;
    package.subcharts = subcharts;
    package
}

fn leaf(name: &str, values: Value) -> Package {
    chart(name, values, "", Vec::new())
}

fn seen(package: &Package, given: Value) -> Value {
    coalesced(package, &given, Enabling::ByValues).values
}

/// The keys of the subcharts that take part, in Helm's order.
fn keys_taking_part(package: &Package, given: Value) -> Vec<String> {
    coalesced(package, &given, Enabling::ByValues)
        .subcharts
        .into_iter()
        .map(|s| s.key)
        .collect()
}

#[test]
fn given_values_override_defaults_and_their_nulls_delete_them() {
    let app = leaf(
        "app",
        json!({"image": {"repository": "r", "tag": "1"}, "extra": {"a": 1}, "unset": null}),
    );
    assert_eq!(
        seen(
            &app,
            json!({"image": {"tag": "2"}, "extra": null, "new": [1], "nothing": null})
        ),
        // A null with no default under it stays, as in Helm.
        json!({"image": {"repository": "r", "tag": "2"}, "new": [1], "nothing": null})
    );
}

#[test]
fn subchart_defaults_are_coalesced_under_their_alias_or_name() {
    let parent = chart(
        "parent",
        json!({"store": {"port": 1}}),
        "[{name: db, alias: store}, {name: web}]",
        vec![
            leaf("db", json!({"port": 5432, "user": "db"})),
            leaf("web", json!({"replicaCount": 1})),
        ],
    );
    let values = seen(&parent, json!({"web": {"replicaCount": 3}}));
    assert_eq!(
        values["store"],
        json!({"port": 1, "user": "db", "global": {}})
    );
    assert_eq!(values["web"], json!({"replicaCount": 3, "global": {}}));
    assert!(values.get("db").is_none());
}

#[test]
fn a_chart_aliased_twice_takes_two_places() {
    let parent = chart(
        "parent",
        json!({}),
        "[{name: db, alias: a}, {name: db, alias: b}]",
        vec![leaf("db", json!({"port": 1}))],
    );
    let coalesced = coalesced(&parent, &json!({"b": {"port": 2}}), Enabling::ByValues);
    assert_eq!(coalesced.values["a"]["port"], 1);
    assert_eq!(coalesced.values["b"]["port"], 2);
    let keys: Vec<(&str, usize)> = coalesced
        .subcharts
        .iter()
        .map(|s| (s.key.as_str(), s.index))
        .collect();
    assert_eq!(keys, [("a", 0), ("b", 0)]);
}

#[test]
fn a_dependency_names_a_chart_only_with_a_version_it_accepts() {
    let mut parent = chart(
        "parent",
        json!({}),
        "[{name: db, alias: a}, {name: db, alias: b, version: '^2'}, {name: db, alias: c, version: '~1.0'}]",
        vec![leaf("db", json!({"port": 1}))],
    );
    parent.metadata.dependencies[0].version = None;
    let keys = keys_taking_part(&parent, json!({}));
    assert_eq!(keys, ["c"]);
    // With no dependency naming it, the chart takes part under its own name.
    parent.metadata.dependencies.truncate(2);
    let keys = keys_taking_part(&parent, json!({}));
    assert_eq!(keys, ["db"]);
}

#[test]
fn a_disabled_dependency_leaves_out_every_subchart_under_its_key() {
    let mut parent = chart(
        "parent",
        json!({}),
        "[{name: db, condition: db.enabled}]",
        vec![leaf("db", json!({"enabled": false}))],
    );
    parent.metadata.dependencies[0].version = None;
    let coalesced = coalesced(&parent, &json!({}), Enabling::ByValues);
    assert!(coalesced.subcharts.is_empty());
}

#[test]
fn subcharts_no_dependency_names_take_part_under_their_names() {
    let parent = chart(
        "parent",
        json!({}),
        "",
        vec![leaf("db", json!({"port": 1}))],
    );
    assert_eq!(
        seen(&parent, json!({}))["db"],
        json!({"port": 1, "global": {}})
    );
}

#[test]
fn globals_are_copied_down_and_the_parents_win() {
    let web = leaf(
        "web",
        json!({"global": {"region": "us", "shared": {"a": "web", "b": "web"}, "own": "web"}}),
    );
    let parent = chart(
        "parent",
        json!({"global": {"region": "eu", "shared": {"a": "parent"}}}),
        "[{name: web}]",
        vec![web],
    );
    let values = seen(&parent, json!({"global": {"given": 1}}));
    assert_eq!(
        values["web"]["global"],
        json!({"region": "eu", "shared": {"a": "parent", "b": "web"}, "own": "web", "given": 1})
    );
    // Nothing flows up.
    assert_eq!(
        values["global"],
        json!({"region": "eu", "shared": {"a": "parent"}, "given": 1})
    );
}

#[test]
fn a_given_null_deletes_a_subchart_default() {
    let parent = chart(
        "parent",
        json!({}),
        "[{name: web}]",
        vec![leaf("web", json!({"drop": "d", "keep": "k"}))],
    );
    assert_eq!(
        seen(&parent, json!({"web": {"drop": null}}))["web"],
        json!({"keep": "k", "global": {}})
    );
}

#[test]
fn a_parents_null_deletes_a_subchart_default_only_when_values_are_given_for_it() {
    let parent = chart(
        "parent",
        json!({"web": {"drop": null}}),
        "[{name: web}]",
        vec![leaf("web", json!({"drop": "d"}))],
    );
    // Helm drops the parent's nulls before the subchart's defaults are laid beneath them
    // unless the given values hold the subchart's table, which keeps them.
    assert_eq!(seen(&parent, json!({}))["web"]["drop"], "d");
    assert!(
        seen(&parent, json!({"web": {"other": 1}}))["web"]
            .get("drop")
            .is_none()
    );
}

#[test]
fn conditions_leave_subcharts_out() {
    let parent = chart(
        "parent",
        json!({"db": {"enabled": false}}),
        "[{name: db, condition: db.enabled}]",
        vec![leaf("db", json!({"enabled": true, "port": 1}))],
    );
    let off = coalesced(&parent, &json!({}), Enabling::ByValues);
    assert_eq!(off.values["db"], json!({"enabled": false}));
    assert!(off.subcharts.is_empty());
    let on = coalesced(
        &parent,
        &json!({"db": {"enabled": true}}),
        Enabling::ByValues,
    );
    assert_eq!(on.values["db"]["port"], 1);
    assert_eq!(on.subcharts.len(), 1);
}

#[test]
fn the_first_boolean_condition_counts_even_a_subcharts_own_default() {
    let parent = chart(
        "parent",
        json!({"flags": {"db": "yes"}}),
        "[{name: db, condition: 'flags.db,missing.path,db.enabled,flags.other'}]",
        vec![leaf("db", json!({"enabled": false}))],
    );
    let coalesced = coalesced(
        &parent,
        &json!({"flags": {"other": true}}),
        Enabling::ByValues,
    );
    assert!(coalesced.subcharts.is_empty());
}

#[test]
fn tags_enable_and_disable_and_conditions_override_them() {
    let parent = chart(
        "parent",
        json!({"tags": {"back": false}}),
        "[{name: a, tags: [back]}, {name: b, tags: [back, front]}, {name: c, tags: [back], condition: c.on}]",
        vec![
            leaf("a", json!({})),
            leaf("b", json!({})),
            leaf("c", json!({})),
        ],
    );
    let keys = |given: Value| keys_taking_part(&parent, given);
    assert_eq!(keys(json!({})), Vec::<String>::new());
    assert_eq!(keys(json!({"tags": {"front": true}})), ["b"]);
    assert_eq!(keys(json!({"c": {"on": true}})), ["c"]);
    assert_eq!(keys(json!({"tags": {"back": true}})), ["a", "b", "c"]);
}

#[test]
fn defaults_have_every_subchart_and_keep_nulls() {
    let parent = chart(
        "parent",
        json!({"db": {"enabled": false}, "name": null}),
        "[{name: db, condition: db.enabled}]",
        vec![leaf("db", json!({"port": 1, "password": null}))],
    );
    // The nulls of values.yaml files stay: they say what may be null.
    assert_eq!(
        defaults(&parent),
        json!({"db": {"enabled": false, "port": 1, "password": null, "global": {}}, "name": null})
    );
}

#[test]
fn imports_lie_beneath_the_parents_own_values() {
    let db = leaf(
        "db",
        json!({"info": {"from": "db", "mine": "db"}, "exports": {"conn": {"host": "db"}}}),
    );
    let parent = chart(
        "parent",
        json!({"imported": {"mine": "parent"}, "store": {"info": {"from": "parent's"}}}),
        "[{name: db, alias: store, import-values: [{child: info, parent: imported}, conn]}]",
        vec![db],
    );
    let values = seen(&parent, json!({"host": "given"}));
    assert_eq!(
        values["imported"],
        json!({"from": "parent's", "mine": "parent"})
    );
    assert_eq!(values["host"], "given");
    assert_eq!(seen(&parent, json!({}))["host"], "db");
}

#[test]
fn an_earlier_import_wins_and_a_missing_table_imports_nothing() {
    let db = leaf("db", json!({"one": {"k": 1}, "two": {"k": 2, "j": 2}}));
    let parent = chart(
        "parent",
        json!({}),
        "[{name: db, import-values: [{child: one, parent: x.y}, {child: two, parent: x.y}, {child: none, parent: z}, 7]}]",
        vec![db],
    );
    let values = seen(&parent, json!({}));
    assert_eq!(values["x"], json!({"y": {"k": 1, "j": 2}}));
    assert!(values.get("z").is_none());
}

#[test]
fn a_subchart_left_out_imports_nothing() {
    let parent = chart(
        "parent",
        json!({}),
        "[{name: db, condition: db.enabled, import-values: [{child: info, parent: info}]}]",
        vec![leaf("db", json!({"info": {"a": 1}}))],
    );
    assert_eq!(
        seen(&parent, json!({"db": {"enabled": false}})),
        json!({"db": {"enabled": false}})
    );
}

#[test]
fn nested_subcharts_get_their_parents_globals_and_defaults() {
    let inner = leaf("inner", json!({"depth": 2}));
    let middle = chart(
        "middle",
        json!({"inner": {"set": "middle"}}),
        "[{name: inner}]",
        vec![inner],
    );
    let parent = chart(
        "parent",
        json!({"global": {"g": 1}}),
        "[{name: middle}]",
        vec![middle],
    );
    let coalesced = coalesced(&parent, &json!({}), Enabling::ByValues);
    assert_eq!(
        coalesced.values["middle"]["inner"],
        json!({"depth": 2, "set": "middle", "global": {"g": 1}})
    );
    assert_eq!(coalesced.subcharts[0].subcharts[0].key, "inner");
}

#[test]
fn values_for_a_subchart_that_are_not_an_object_are_left_to_validation() {
    let parent = chart(
        "parent",
        json!({}),
        "[{name: db}]",
        vec![leaf("db", json!({"port": 1}))],
    );
    assert_eq!(seen(&parent, json!({"db": 5}))["db"], 5);
}

#[test]
fn merging_keeps_nulls_and_coalescing_acts_on_them() {
    use super::tables::{Nulls, coalesce_tables};
    let over = json!({"a": null, "b": {"c": null}, "n": null});
    let under = json!({"a": 1, "b": {"c": 2, "d": 3}, "e": 4});
    let laid = |nulls| {
        let mut dst = over.as_object().cloned().unwrap();
        coalesce_tables(&mut dst, under.as_object().cloned().unwrap(), nulls);
        Value::Object(dst)
    };
    assert_eq!(
        laid(Nulls::Keep),
        json!({"a": null, "b": {"c": null, "d": 3}, "n": null, "e": 4})
    );
    assert_eq!(
        laid(Nulls::Delete),
        json!({"b": {"d": 3}, "n": null, "e": 4})
    );
}

#[test]
fn a_global_that_is_not_a_table_is_not_copied_down() {
    let parent = chart(
        "parent",
        json!({"global": "flat"}),
        "[{name: web}]",
        vec![leaf("web", json!({"global": {"own": 1}}))],
    );
    assert_eq!(seen(&parent, json!({}))["web"]["global"], json!({"own": 1}));
}
