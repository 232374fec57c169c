//! The metrics of one process, with bounded labels only (never object names).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::EncodeLabelValue;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// How a reconcile ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum ReconcileOutcome {
    /// It succeeded.
    Success,
    /// It failed and will be retried.
    Error,
}

/// How a Helm call ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum HelmOutcome {
    /// Exit code 0.
    Success,
    /// Non-zero exit, timeout or spawn failure.
    Failure,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReconcileLabels {
    outcome: ReconcileOutcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HelmLabels {
    verb: String,
    outcome: HelmOutcome,
}

/// Counters and histograms, registered under the `compositor_` prefix.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ReconcileLabels, Counter>,
    reconcile_seconds: Histogram,
    helm_calls: Family<HelmLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("compositor");
        let reconciles = Family::<ReconcileLabels, Counter>::default();
        registry.register("reconciles", "Reconciles by outcome", reconciles.clone());
        let reconcile_seconds = Histogram::new(exponential_buckets(0.01, 2.0, 14));
        registry.register(
            "reconcile_duration_seconds",
            "Time spent in one reconcile",
            reconcile_seconds.clone(),
        );
        let helm_calls = Family::<HelmLabels, Counter>::default();
        registry.register(
            "helm_calls",
            "Calls to the helm CLI by verb and outcome",
            helm_calls.clone(),
        );
        Metrics {
            registry,
            reconciles,
            reconcile_seconds,
            helm_calls,
        }
    }
}

impl Metrics {
    /// Records one reconcile.
    pub fn reconciled(&self, outcome: ReconcileOutcome, took: Duration) {
        self.reconciles
            .get_or_create(&ReconcileLabels { outcome })
            .inc();
        self.reconcile_seconds.observe(took.as_secs_f64());
    }

    /// Records one Helm call.
    pub fn helm_call(&self, verb: &str, outcome: HelmOutcome) {
        self.helm_calls
            .get_or_create(&HelmLabels {
                verb: verb.to_string(),
                outcome,
            })
            .inc();
    }

    /// Helm calls made so far with `verb`, whatever their outcome.
    pub fn helm_calls(&self, verb: &str) -> u64 {
        [HelmOutcome::Success, HelmOutcome::Failure]
            .into_iter()
            .map(|outcome| {
                self.helm_calls
                    .get_or_create(&HelmLabels {
                        verb: verb.to_string(),
                        outcome,
                    })
                    .get()
            })
            .sum()
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_exposed_with_bounded_labels() {
        let metrics = Metrics::default();
        metrics.reconciled(ReconcileOutcome::Success, Duration::from_millis(20));
        metrics.helm_call("template", HelmOutcome::Success);
        metrics.helm_call("template", HelmOutcome::Failure);
        assert_eq!(metrics.helm_calls("template"), 2);
        let text = metrics.encode().expect("encode");
        assert!(
            text.contains("compositor_reconciles_total{outcome=\"Success\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("compositor_helm_calls_total{verb=\"template\",outcome=\"Failure\"} 1"),
            "{text}"
        );
    }
}
