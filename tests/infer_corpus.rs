//! Inference measured on the corpus (`testdata/corpus`) with each chart's schema set
//! aside: the chart's own values.yaml is accepted with nothing pruned, and the inferred types
//! agree with the declared ones on the fields both type (the table is printed).

mod corpus_support;
mod support;

use compositor::api::NameOverrides;
use compositor::chart::Package;
use compositor::crd::{self, BuildOptions};
use compositor::schema::infer::{self, Agreement, Inferred};
use compositor::schema::{self, ConvertOptions};
use corpus_support::{
    corpus, delete_crds, establish, missing, object_of, unkept, while_discovery_lags,
    wrong_type_refused,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

/// The structural `spec` of a chart's schema, as the converter makes it.
fn converted(package: &Package) -> JSONSchemaProps {
    let schema = package.schema.as_ref().expect("a schema");
    schema::convert(schema, package, &ConvertOptions::default()).0
}

/// `package` without its values.schema.json, inferred.
fn inferred(package: &Package) -> Inferred {
    let mut bare = package.clone();
    bare.schema = None;
    infer::infer(&bare, &[])
}

/// The agreement columns of the table.
fn row(a: &Agreement) -> String {
    format!(
        "{} | {} | {} | {} | {:.1}% | {:.1}%",
        a.compared,
        a.agreed,
        a.integer_for_number,
        a.compared - a.agreed - a.integer_for_number,
        100.0 * a.rate(),
        100.0 * a.rate_with_integers()
    )
}

/// Offline: every chart's own values.yaml passes its inferred schema, in the CRD (nothing
/// pruned) and in the controller's validation; the inferred types agree with the declared
/// ones, field by field.
#[test]
fn inferred_schemas_accept_their_values_and_agree_with_declared_ones() {
    let mut failures = Vec::new();
    let mut total = Agreement::default();
    eprintln!(
        "| chart | typed | open | compared | same type | integer for number | other | agreement | with integers |"
    );
    eprintln!("|---|---|---|---|---|---|---|---|---|");
    for (name, package) in corpus() {
        let inference = inferred(&package);
        let spec = converted(&inference.package);
        failures.extend(unkept(&name, &package.values, &spec));
        let refused =
            schema::validate_package(&package.values, &inference.package).expect("compiles");
        failures.extend(refused.iter().map(|v| format!("{name}: refused {v}")));
        let agreement = infer::agreement(&converted(&package), &spec, "spec");
        let report = &inference.report;
        eprintln!(
            "| {name} | {} | {} | {} |",
            report.typed(),
            report.open(),
            row(&agreement)
        );
        for difference in &agreement.differences {
            eprintln!("|   {difference} | | | | | | | | |");
        }
        total.add(&agreement);
    }
    eprintln!("| all | | | {} |", row(&total));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // What is left are fields whose publishers disagree among themselves: probe ports that
    // may be named, `maxUnavailable: ""` that bitnami types as a string, a tag typed as
    // int-or-string; a rule that moved the rate down would be a regression.
    assert!(
        total.rate_with_integers() >= 0.99,
        "agreement fell to {:.1}%",
        100.0 * total.rate_with_integers()
    );
}

/// What the API server answers to `spec` applied as kubectl applies (strict field validation).
async fn apply(
    api: &Api<DynamicObject>,
    crd: &CustomResourceDefinition,
    spec: &Value,
) -> Result<DynamicObject, kube::Error> {
    let object = object_of(crd, "values", spec);
    let params = PatchParams::apply("infer-corpus").validation_strict();
    let patch = Patch::Apply(&object);
    while_discovery_lags(|| api.patch("values", &params, &patch)).await
}

/// Against the test bed's apiserver, each chart with its schema set aside: the inferred CRD is
/// Established, the chart's values.yaml is accepted and read back whole, and a top-level typo
/// and a wrong scalar type are refused, naming the field.
#[tokio::test]
async fn inferred_crds_accept_values_and_refuse_typos_and_wrong_types() {
    let charts = corpus();
    if charts.is_empty() {
        return;
    }
    let client = support::client().await;
    let namespace = support::namespace(&client, "infer").await;
    let group = format!("{}.infer.compositor.dev", support::unique("g"));
    let mut failures = Vec::new();
    let mut crd_names = Vec::new();
    for (name, package) in &charts {
        let mut bare = package.clone();
        bare.schema = None;
        let options = BuildOptions {
            names: NameOverrides {
                group: Some(group.clone()),
                ..Default::default()
            },
            version_name: Some("v1".to_owned()),
            ..Default::default()
        };
        let (crd, notes) = crd::build(&bare, &options).expect("build");
        assert!(notes.inferred.is_some(), "{name}: not inferred");
        crd_names.push(crd.metadata.name.clone().unwrap_or_default());
        let api = match establish(&client, &crd, &namespace).await {
            Ok(api) => api,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        match apply(&api, &crd, &package.values).await {
            Ok(stored) => {
                let mut lost = Vec::new();
                missing(&package.values, &stored.data["spec"], "spec", &mut lost);
                failures.extend(lost.into_iter().map(|l| format!("{name}: {l}")));
            }
            Err(e) => failures.push(format!("{name}: values.yaml refused: {e}")),
        }
        let Some((key, _)) = package.values.as_object().and_then(|m| m.iter().next()) else {
            continue;
        };
        let typo = format!("{key}Typo");
        match apply(&api, &crd, &json!({typo.clone(): 1})).await {
            Err(e) if e.to_string().contains(&format!("spec.{typo}")) => {
                eprintln!("{name}: typo refused: {e}")
            }
            other => failures.push(format!("{name}: typo {typo}: {other:?}")),
        }
        let params = PatchParams::apply("infer-corpus").validation_strict();
        if let Some(failure) = wrong_type_refused(&api, &crd, &params).await {
            failures.push(format!("{name}: {failure}"));
        }
    }
    delete_crds(&client, &crd_names).await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
