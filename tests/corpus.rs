//! The corpus of real chart schemas (`testdata/corpus`): every schema converts into a
//! CRD that a real apiserver establishes, and every chart's own values.yaml, as the `spec` of a
//! custom resource, is accepted and read back without losing a value.

mod corpus_support;
mod support;

use compositor::api::NameOverrides;
use compositor::crd::{self, BuildOptions};
use compositor::schema::{self, ConvertOptions};
use corpus_support::{corpus, establish, missing, object_of, unkept, while_discovery_lags};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, PostParams};

/// Offline: every schema converts to a structural schema that keeps every value of values.yaml.
#[test]
fn corpus_converts_to_structural_schemas_that_keep_values() {
    let mut failures = Vec::new();
    for (name, package) in corpus() {
        let (spec, _) = schema::convert(
            package.schema.as_ref().unwrap(),
            &package,
            &ConvertOptions::default(),
        );
        failures.extend(unkept(&name, &package.values, &spec));
        let (with_defaults, _) = schema::convert(
            package.schema.as_ref().unwrap(),
            &package,
            &ConvertOptions {
                apply_defaults: true,
                ..ConvertOptions::default()
            },
        );
        for p in schema::structural_problems(&with_defaults) {
            failures.push(format!("{name} (applyDefaults): {p}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Offline: each chart's values.yaml is checked against its original schema without error.
#[test]
fn corpus_schemas_compile_for_validation() {
    for (name, package) in corpus() {
        let result = schema::validate(&package.values, package.schema.as_ref().unwrap());
        assert!(result.is_ok(), "{name}: {result:?}");
    }
}

/// Against the test bed's apiserver: 14/14 CRDs Established, 14/14 values.yaml objects created
/// and read back whole. Each chart is tried with and without applied defaults.
#[tokio::test]
async fn corpus_crds_are_established_and_accept_values() {
    let charts = corpus();
    if charts.is_empty() {
        return;
    }
    let client = support::client().await;
    let namespace = support::namespace(&client, "corpus").await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    // A group of this run only, so nothing collides with other tests on the same apiserver.
    let group = format!("{}.corpus.compositor.dev", support::unique("g"));
    let mut failures = Vec::new();
    let mut established = 0;
    let mut accepted = 0;
    for apply_defaults in [false, true] {
        for (name, package) in &charts {
            let kind = format!(
                "{}{}",
                crd::kind_from_chart(&package.metadata.name),
                if apply_defaults { "D" } else { "" }
            );
            let options = BuildOptions {
                names: NameOverrides {
                    group: Some(group.clone()),
                    kind: Some(kind.clone()),
                    ..Default::default()
                },
                // Chart versions in the corpus include placeholders; the name is not under test.
                version_name: Some("v1".to_owned()),
                convert: ConvertOptions {
                    apply_defaults,
                    ..ConvertOptions::default()
                },
                ..Default::default()
            };
            let (crd, _) = crd::build(package, &options).expect("build");
            let api = match establish(&client, &crd, &namespace).await {
                Ok(api) => api,
                Err(e) => {
                    failures.push(format!("{name} (defaults {apply_defaults}): {e}"));
                    continue;
                }
            };
            established += 1;
            let object = object_of(&crd, "values", &package.values);
            let params = PostParams::default();
            let created = while_discovery_lags(|| api.create(&params, &object)).await;
            if let Err(e) = created {
                failures.push(format!(
                    "{name} (defaults {apply_defaults}): values.yaml rejected: {e}"
                ));
                continue;
            }
            let stored = api.get("values").await.expect("read back");
            let mut lost = Vec::new();
            missing(&package.values, &stored.data["spec"], "spec", &mut lost);
            if lost.is_empty() {
                accepted += 1;
            }
            failures.extend(
                lost.into_iter()
                    .map(|l| format!("{name} (defaults {apply_defaults}): {l}")),
            );
        }
    }
    let tries = 2 * charts.len();
    eprintln!(
        "corpus: {established}/{tries} CRDs Established, {accepted}/{tries} values.yaml objects accepted and intact"
    );
    for (_, package) in &charts {
        for suffix in ["", "D"] {
            let kind = format!("{}{suffix}", crd::kind_from_chart(&package.metadata.name));
            let plural = crd::plural_of(&kind.to_lowercase());
            let _ = crds
                .delete(&format!("{plural}.{group}"), &DeleteParams::default())
                .await;
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!((established, accepted), (tries, tries));
}
