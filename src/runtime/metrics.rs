//! The metrics of one process, with bounded labels only (never object names).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use kube::runtime::reflector::{Lookup, Store};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::EncodeLabelValue;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiLabels {
    cluster: String,
    verb: String,
    resource: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: String,
}

/// Objects whose phases are counted in a gauge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counted {
    /// CompositionDefinitions (`compositor_definitions{phase}`): `Ready` or `NotReady`.
    Definitions,
    /// Compositions of the controller's version (`compositor_compositions{phase}`): `Ready`,
    /// `Progressing`, `Failed` or `Paused`.
    Compositions,
}

impl Counted {
    /// Every phase, reported even at 0 so that a dashboard sees a phase empty out.
    fn phases(self) -> &'static [&'static str] {
        match self {
            Counted::Definitions => &["Ready", "NotReady"],
            Counted::Compositions => &["Ready", "Progressing", "Failed", "Paused"],
        }
    }
}

/// Counts objects by phase at each scrape.
type PhaseSource = Box<dyn Fn() -> BTreeMap<&'static str, i64> + Send + Sync>;

/// Counters, gauges and histograms, registered under the `compositor_` prefix.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ReconcileLabels, Counter>,
    reconcile_seconds: Histogram,
    helm_calls: Family<HelmLabels, Counter>,
    api_requests: Family<ApiLabels, Counter>,
    definitions: Family<PhaseLabels, Gauge>,
    compositions: Family<PhaseLabels, Gauge>,
    /// Where the phase gauges come from: the reconciler's cache, read at each scrape, so the
    /// gauges are exactly what the cluster says and need no bookkeeping on deletion.
    phase_sources: Mutex<Vec<(Counted, PhaseSource)>>,
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
        let api_requests = Family::<ApiLabels, Counter>::default();
        registry.register(
            "api_requests",
            "Requests to the Kubernetes API by cluster, verb, resource and HTTP status code",
            api_requests.clone(),
        );
        let definitions = Family::<PhaseLabels, Gauge>::default();
        registry.register(
            "definitions",
            "CompositionDefinitions by phase (reported by the operator that leads)",
            definitions.clone(),
        );
        let compositions = Family::<PhaseLabels, Gauge>::default();
        registry.register(
            "compositions",
            "Compositions of this controller's version by status phase (reported by the controller that leads)",
            compositions.clone(),
        );
        Metrics {
            registry,
            reconciles,
            reconcile_seconds,
            helm_calls,
            api_requests,
            definitions,
            compositions,
            phase_sources: Mutex::default(),
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

    /// Records one request to the API of `cluster` (`local` or a registered cluster's name) and
    /// its status code.
    pub fn api_request(&self, cluster: &str, verb: &str, resource: &str, code: &str) {
        self.api_requests
            .get_or_create(&ApiLabels {
                cluster: cluster.to_string(),
                verb: verb.to_string(),
                resource: resource.to_string(),
                code: code.to_string(),
            })
            .inc();
    }

    /// Counts the objects in `store` by `phase` (objects without one are not counted) in the
    /// gauge of `counted`, at every scrape.
    pub fn count_phases<K>(
        &self,
        counted: Counted,
        store: Store<K>,
        phase: impl Fn(&K) -> Option<&'static str> + Send + Sync + 'static,
    ) where
        K: Lookup + Clone + Send + Sync + 'static,
        K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
    {
        let source: PhaseSource = Box::new(move || {
            let mut counts = BTreeMap::new();
            for object in store.state() {
                if let Some(phase) = phase(&object) {
                    *counts.entry(phase).or_insert(0) += 1;
                }
            }
            counts
        });
        if let Ok(mut sources) = self.phase_sources.lock() {
            sources.push((counted, source));
        }
    }

    /// Sets the phase gauges from their sources.
    fn refresh_phases(&self) {
        let Ok(sources) = self.phase_sources.lock() else {
            return;
        };
        for (counted, source) in sources.iter() {
            let family = match counted {
                Counted::Definitions => &self.definitions,
                Counted::Compositions => &self.compositions,
            };
            let counts = source();
            for phase in counted.phases() {
                let labels = PhaseLabels {
                    phase: phase.to_string(),
                };
                family
                    .get_or_create(&labels)
                    .set(counts.get(phase).copied().unwrap_or(0));
            }
        }
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        self.refresh_phases();
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

    #[test]
    fn phases_are_counted_from_the_cache_at_each_scrape() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::runtime::watcher::Event;
        let metrics = Metrics::default();
        let (reader, mut writer) = kube::runtime::reflector::store::<ConfigMap>();
        metrics.count_phases(
            Counted::Compositions,
            reader,
            |object: &ConfigMap| match object.metadata.name.as_deref() {
                Some("skipped") => None,
                Some(name) if name.starts_with("ready") => Some("Ready"),
                _ => Some("Failed"),
            },
        );
        let object = |name: &str| ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        for name in ["ready-1", "ready-2", "broken", "skipped"] {
            writer.apply_watcher_event(&Event::Apply(object(name)));
        }
        let text = metrics.encode().expect("encode");
        for line in [
            "compositor_compositions{phase=\"Ready\"} 2",
            "compositor_compositions{phase=\"Failed\"} 1",
            "compositor_compositions{phase=\"Paused\"} 0",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        writer.apply_watcher_event(&Event::Delete(object("broken")));
        let text = metrics.encode().expect("encode");
        assert!(
            text.contains("compositor_compositions{phase=\"Failed\"} 0"),
            "{text}"
        );
    }
}
