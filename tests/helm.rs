//! The Helm engine against the real `helm` and the test charts.

mod support;

use std::sync::Arc;
use std::time::Duration;

use compositor::helm::{Engine, Error, parse_manifest};
use compositor::runtime::Metrics;
use serde_json::json;

fn engine(metrics: &Arc<Metrics>) -> Engine {
    Engine::locate(
        Some(support::env("HELM_BIN").into()),
        Duration::from_secs(60),
        metrics.clone(),
    )
    .expect("helm")
}

#[tokio::test]
async fn template_renders_a_chart_offline_and_is_counted() {
    let metrics = Arc::new(Metrics::default());
    let chart = support::packaged_chart("optional-kind", "0.1.0");
    let manifest = engine(&metrics)
        .template(
            &chart,
            "demo",
            "team-a",
            &json!({"networkPolicy": {"enabled": true}}),
        )
        .await
        .expect("template");
    let mut kinds: Vec<_> = parse_manifest(&manifest)
        .expect("manifest")
        .into_iter()
        .map(|o| o.kind)
        .collect();
    kinds.sort();
    assert_eq!(kinds, ["ConfigMap", "NetworkPolicy"]);
    assert_eq!(metrics.helm_calls("template"), 1);
}

#[tokio::test]
async fn a_failing_call_reports_helms_own_words() {
    let metrics = Arc::new(Metrics::default());
    let chart = support::packaged_chart("fireworks-app", "1.1.5");
    // The chart's schema requires git.repository to match ^[a-z0-9-]+$.
    let error = engine(&metrics)
        .template(
            &chart,
            "demo",
            "team-a",
            &json!({"git": {"repository": "Not Valid"}}),
        )
        .await
        .expect_err("schema violation");
    assert!(
        matches!(
            error,
            Error::Failed {
                verb: "template",
                ..
            }
        ),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("git") && !message.starts_with("Error:"),
        "{message}"
    );
    assert_eq!(error.reason(), "HelmFailed");
    assert_eq!(metrics.helm_calls("template"), 1);
}
