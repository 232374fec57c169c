//! Real published charts without a values.schema.json (`testdata/charts/no-schema`, see its
//! SOURCES.md) get a typed API: their own values are accepted whole, a typo and a wrong type
//! are refused (by the API server and by the controller's validation, which says the rule was
//! inferred), and subcharts are typed under their keys.

mod corpus_support;
mod support;

use std::path::{Path, PathBuf};

use compositor::api::NameOverrides;
use compositor::chart::Package;
use compositor::chart::values;
use compositor::crd::{self, BuildOptions};
use compositor::schema::{self, infer};
use corpus_support::{
    delete_crds, establish, missing, object_of, spec_of, unkept, while_discovery_lags,
    wrong_type_refused,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

/// Each packaged chart of `testdata/charts/no-schema`, by file name.
fn charts() -> Vec<(String, Package)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/charts/no-schema");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("testdata/charts/no-schema")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "tgz"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "{files:?}");
    files
        .iter()
        .map(|f| {
            let name = f.file_stem().unwrap().to_string_lossy().into_owned();
            let package = Package::load(f).expect("a chart");
            assert!(package.schema.is_none(), "{name} has a schema");
            (name, package)
        })
        .collect()
}

/// The chart's CRD with an inferred `spec`, in `group`, and its inference.
fn built(package: &Package, group: &str) -> (CustomResourceDefinition, infer::Report) {
    let options = BuildOptions {
        names: NameOverrides {
            group: Some(group.to_owned()),
            ..Default::default()
        },
        ..Default::default()
    };
    let (crd, notes) = crd::build(package, &options).expect("build");
    (crd, notes.inferred.expect("inferred"))
}

/// Paths the controller's validation refuses in `values`, with their messages.
fn refused(package: &Package, values: &Value) -> Vec<String> {
    let inferred = infer::infer(package, &[]);
    schema::validate_package(values, &inferred.package)
        .expect("compiles")
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// Offline: every chart's defaults (its subcharts' under their keys) are kept whole by the
/// CRD and pass validation; the inference is printed, one table row per chart.
#[test]
fn real_charts_without_a_schema_get_typed_apis() {
    let mut failures = Vec::new();
    eprintln!("| chart | typed | open | top level |");
    eprintln!("|---|---|---|---|");
    for (name, package) in charts() {
        let (crd, report) = built(&package, "example.org");
        let defaults = values::defaults(&package);
        failures.extend(unkept(&name, &defaults, spec_of(&crd)));
        failures.extend(
            refused(&package, &package.values)
                .into_iter()
                .map(|v| format!("{name}: {v}")),
        );
        let lines = report.lines();
        eprintln!(
            "| {name} | {} | {} | {} |",
            report.typed(),
            report.open(),
            lines[1]
        );
        for line in &lines[2..] {
            eprintln!("|   {line} | | | |");
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn subcharts_are_typed_under_their_keys() {
    let charts = charts();
    let (_, tempo) = charts
        .iter()
        .find(|(n, _)| n.starts_with("grafana-tempo"))
        .expect("tempo");
    let (crd, _) = built(tempo, "example.org");
    let memcached = &spec_of(&crd).properties.as_ref().unwrap()["memcached"];
    assert_eq!(memcached.x_kubernetes_preserve_unknown_fields, Some(true));
    let fields = memcached.properties.as_ref().unwrap();
    assert_eq!(fields["enabled"].type_.as_deref(), Some("boolean"));
    assert_eq!(fields["replicaCount"].type_.as_deref(), Some("integer"));
    assert!(
        fields["replicaCount"]
            .description
            .as_deref()
            .unwrap()
            .starts_with("Number of Memcached nodes")
    );
    let wrong = refused(tempo, &json!({"memcached": {"replicaCount": "two"}}));
    assert_eq!(wrong.len(), 1, "{wrong:?}");
    assert!(
        wrong[0].starts_with("memcached.replicaCount: ")
            && wrong[0].contains("inferred from values.yaml default"),
        "{wrong:?}"
    );
    let (_, rollout) = charts
        .iter()
        .find(|(n, _)| n.starts_with("rollout-operator"))
        .expect("rollout-operator");
    let (crd, _) = built(rollout, "example.org");
    let crds = &spec_of(&crd).properties.as_ref().unwrap()["crds"];
    assert_eq!(
        crds.properties.as_ref().unwrap()["enabled"]
            .type_
            .as_deref(),
        Some("boolean")
    );
}

#[test]
fn a_typo_is_refused_unless_the_chart_reads_values_whole() {
    for (name, package) in charts() {
        let typo = refused(&package, &json!({"replicaCuont": 2}));
        if name.starts_with("kube-state-metrics") {
            // It hands `.Values` whole to a helper (imagePullSecrets).
            assert_eq!(typo, Vec::<String>::new(), "{name}");
        } else {
            assert_eq!(typo.len(), 1, "{name}: {typo:?}");
            assert!(
                typo[0].contains("replicaCuont") && typo[0].contains("set spec.schema.openKeys"),
                "{name}: {typo:?}"
            );
        }
    }
}

/// Against the test bed's apiserver: each CRD is Established, the chart's values.yaml is
/// accepted and read back whole, and a wrong type is refused naming the field.
#[tokio::test]
async fn real_charts_crds_accept_their_values_and_refuse_wrong_types() {
    let client = support::client().await;
    let namespace = support::namespace(&client, "infer-charts").await;
    let group = format!("{}.infer.compositor.dev", support::unique("g"));
    let mut failures = Vec::new();
    let mut names = Vec::new();
    for (name, package) in charts() {
        let (crd, _) = built(&package, &group);
        names.push(crd.metadata.name.clone().unwrap_or_default());
        let api = match establish(&client, &crd, &namespace).await {
            Ok(api) => api,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        let params = PatchParams::apply("infer-charts").validation_strict();
        let object = object_of(&crd, "values", &package.values);
        let patch = Patch::Apply(&object);
        match while_discovery_lags(|| api.patch("values", &params, &patch)).await {
            Ok(stored) => {
                let mut lost = Vec::new();
                missing(&package.values, &stored.data["spec"], "spec", &mut lost);
                failures.extend(lost.into_iter().map(|l| format!("{name}: {l}")));
            }
            Err(e) => failures.push(format!("{name}: values.yaml refused: {e}")),
        }
        if let Some(failure) = wrong_type_refused(&api, &crd, &params).await {
            failures.push(format!("{name}: {failure}"));
        }
    }
    delete_crds(&client, &names).await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
