//! What a release is made of: the definition (as a watch keeps it), the chart this version
//! installs, fetched as the definition resolved it, and the composition's values, checked
//! against the chart's own schema; together with a target, a [`TargetRelease`].

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::api::Api;
use kube::core::DynamicObject;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::Value;

use super::placement::Target;
use super::reach::Reach;
use super::{Context, Error};
use crate::api::{CompositionDefinition, CompositionDefinitionSpec, HealthSpec, SchemaOptions};
use crate::chart::values::Enabling;
use crate::chart::{self, Fetched};
use crate::schema;

/// This controller's definition, kept by a watch of that one object, so that a reconcile
/// reads it from memory instead of the API server; the cluster Secrets it selects, as the
/// operator publishes them, for the cluster registry; and when its health spec changes.
pub(super) struct DefinitionWatch {
    api: Api<CompositionDefinition>,
    name: String,
    store: Store<CompositionDefinition>,
    selection: tokio::sync::watch::Sender<Option<BTreeSet<String>>>,
    /// The definition's `spec.health`, as last seen.
    health: tokio::sync::watch::Sender<Option<HealthSpec>>,
    task: tokio::task::JoinHandle<()>,
}

impl DefinitionWatch {
    /// Starts watching definition `namespace/name` (it must be called within a Tokio runtime).
    pub(super) fn start(client: Client, namespace: &str, name: &str) -> Self {
        let api = Api::<CompositionDefinition>::namespaced(client, namespace);
        let (store, writer) = reflector::store();
        let selection = tokio::sync::watch::Sender::new(None);
        let publish = selection.clone();
        let health = tokio::sync::watch::Sender::new(None);
        let health_seen = health.clone();
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let events = watcher(api.clone(), config)
            .backoff(crate::runtime::watch_backoff())
            .reflect(writer)
            .for_each(move |event| {
                match event {
                    Ok(
                        watcher::Event::Apply(definition) | watcher::Event::InitApply(definition),
                    ) => {
                        let published = published_selection(&definition);
                        publish.send_if_modified(|known| {
                            let changed = published.is_some() && *known != published;
                            if changed {
                                *known = published;
                            }
                            changed
                        });
                        let now = Some(definition.spec.health.clone());
                        health_seen.send_if_modified(|known| {
                            let changed = *known != now;
                            let first = known.is_none();
                            *known = now;
                            changed && !first
                        });
                    }
                    Ok(_) => {}
                    Err(error) => {
                        tracing::debug!(%error, "watching the definition failed (retrying)")
                    }
                }
                futures::future::ready(())
            });
        DefinitionWatch {
            api,
            name: name.to_string(),
            store,
            selection,
            health,
            task: tokio::spawn(events),
        }
    }

    /// The cluster Secrets the definition selects, as its status publishes them: `None` until
    /// it does. A status without them (the definition was just created, or is being rewritten)
    /// leaves the last published ones.
    pub(super) fn selection(&self) -> crate::clusters::Selection {
        self.selection.subscribe()
    }

    /// Yields whenever the definition's `spec.health` changes (not when it is first seen), so
    /// that every composition is judged by it at once.
    pub(super) fn health_changes(&self) -> futures::stream::BoxStream<'static, ()> {
        let changes = self.health.subscribe();
        futures::stream::unfold(changes, |mut changes| async move {
            changes.changed().await.ok()?;
            Some(((), changes))
        })
        .boxed()
    }

    /// The definition as the watch has it, if it already serves `version`; otherwise (not yet
    /// listed, the watch refused, or a new version the watch has not delivered yet) read fresh.
    pub(super) async fn current(&self, version: &str) -> Result<Arc<CompositionDefinition>, Error> {
        let key = ObjectRef::new(&self.name).within(self.api.namespace().unwrap_or_default());
        if let Some(watched) = self.store.get(&key)
            && serves(&watched, version)
        {
            return Ok(watched);
        }
        let fresh = self
            .api
            .get(&self.name)
            .await
            .map_err(|e| Error::Kube("read definition", e))?;
        Ok(Arc::new(fresh))
    }
}

impl Drop for DefinitionWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The cluster Secrets `definition`'s status names, if it names them.
fn published_selection(definition: &CompositionDefinition) -> Option<BTreeSet<String>> {
    let names = definition.status.as_ref()?.cluster_secrets.as_ref()?;
    Some(names.iter().cloned().collect())
}

/// Whether `definition`'s status lists `version` among its served ones.
fn serves(definition: &CompositionDefinition, version: &str) -> bool {
    let status = definition.status.as_ref();
    status.is_some_and(|s| s.versions.iter().any(|v| v.version == version))
}

/// A chart as the controller installs it: fetched and unpacked, with its values schemas
/// compiled for every composition's values.
pub(super) struct Chart {
    /// The chart.
    pub fetched: Fetched,
    /// Whether a template of the chart or its subcharts calls `lookup`, so that a render reads
    /// the cluster whatever the values.
    pub looks_up: bool,
    /// The definition's schema options the validator was made with.
    options: SchemaOptions,
    validator: schema::PackageValidator,
}

impl Chart {
    fn new(fetched: Fetched, options: &SchemaOptions) -> Result<Self, Error> {
        // The schema the CRD was made of: the chart's own, or the one inferred from its
        // values.yaml, whose refusals then say that they were inferred.
        let inferred = schema::infer::when_asked(&fetched.package, &options.into());
        let package = inferred.as_ref().map_or(&fetched.package, |i| &i.package);
        let validator = schema::PackageValidator::new(package)?;
        let looks_up = fetched
            .package
            .all_templates()
            .iter()
            .any(|template| calls_lookup(&template.content));
        Ok(Chart {
            fetched,
            looks_up,
            options: options.clone(),
            validator,
        })
    }

    /// Every way `values`, as Helm will see them (over the chart's defaults and those of the
    /// subcharts they enable), break the schemas Helm checks.
    pub(super) fn violations(&self, values: &Value) -> Vec<schema::Violation> {
        let coalesced = chart::values::coalesced(&self.fetched.package, values, Enabling::ByValues);
        self.validator.validate(&coalesced)
    }
}

/// The chart this controller fetched last. A controller installs one chart version, so this is
/// the chart nearly every reconcile needs: while the definition reports the same archive
/// digest, it is used as it is, with no credentials read, no archive parsed and no schema
/// compiled again.
#[derive(Default)]
pub(super) struct LastChart(Mutex<Option<Arc<Chart>>>);

impl LastChart {
    /// The remembered chart, if it is `version` with `digest`, validated with `options`, and
    /// its archive (what Helm is given) is still on disk.
    fn get(&self, version: &str, digest: &str, options: &SchemaOptions) -> Option<Arc<Chart>> {
        let last = self.0.lock().ok()?.clone()?;
        let fetched = &last.fetched;
        let same =
            fetched.version == version && fetched.digest == digest && &last.options == options;
        (same && fetched.archive_path.is_file()).then_some(last)
    }

    fn remember(&self, fetched: &Arc<Chart>) {
        if let Ok(mut last) = self.0.lock() {
            *last = Some(fetched.clone());
        }
    }
}

/// The chart this version installs: the chart version the definition resolved for it, fetched
/// with the definition's credentials, unless it is the one fetched last (see [`LastChart`]).
pub(super) async fn fetch_chart(
    definition: &CompositionDefinition,
    context: &Context,
) -> Result<Arc<Chart>, Error> {
    let mine = &context.config.identity.version;
    let status = definition.status.as_ref();
    let served = status
        .and_then(|s| s.versions.iter().find(|v| &v.version == mine))
        .ok_or_else(|| Error::DefinitionNotReady(definition.name_any()))?;
    let chart_version = served.chart_version.clone();
    // The definition reports the digest of its current chart only; an older version's controller
    // (during a move) fetches through the cache as before.
    let digest = status
        .and_then(|s| s.chart.as_ref())
        .filter(|chart| chart.version == chart_version)
        .map(|chart| chart.digest.as_str());
    let options = &definition.spec.schema;
    if let Some(last) =
        digest.and_then(|digest| context.last_chart.get(&chart_version, digest, options))
    {
        return Ok(last);
    }
    let policy = chart::credentials::RefPolicy {
        namespace: context.config.identity.definition.namespace.clone(),
        allow_cross_namespace: context.config.identity.allow_cross_namespace_refs,
    };
    let mut reference =
        chart::credentials::resolve(&context.client, &policy, &definition.spec.chart).await?;
    reference.version = Some(chart_version);
    // A definition naming one archive holds one version: an older one is fetched from the
    // archive it came from.
    if let Some(archive) = &served.archive_url {
        reference.url = archive.clone();
    }
    let fetched = chart::fetch(&reference, &context.cache).await?;
    let chart = Arc::new(Chart::new(fetched, options)?);
    context.last_chart.remember(&chart);
    Ok(chart)
}

/// Refuses `values` with every path that breaks the chart's schema (never a value: some may
/// come from a Secret).
pub(super) fn check_values(values: &Value, chart: &Chart) -> Result<(), Error> {
    let violations = chart.violations(values);
    if !violations.is_empty() {
        let listed: Vec<String> = violations.iter().map(ToString::to_string).collect();
        return Err(Error::InvalidValues(listed.join("; ")));
    }
    Ok(())
}

/// The release of one composition on one target, and what it is installed from.
pub(super) struct TargetRelease<'a> {
    /// What every reconcile shares.
    pub context: &'a Context,
    /// The composition.
    pub object: &'a DynamicObject,
    /// The chart this version installs.
    pub chart: &'a Fetched,
    /// The composition's values, valid for the chart.
    pub values: &'a Value,
    /// What the fingerprint is made of: the values, each Secret's content replaced by its
    /// version (the fingerprint is in the status, which a tenant reads).
    pub fingerprinted: &'a Value,
    /// Where the release goes.
    pub target: &'a Target,
    /// How the target's cluster is reached.
    pub reach: &'a Reach,
    /// Whether the render could read the cluster, so that Helm's own words are withheld.
    pub withhold: bool,
    /// The namespaces a release may write into besides its own, as patterns (`{release}`,
    /// `{namespace}`): the chart's with its default values and the definition's listed ones.
    pub writable: &'a BTreeSet<String>,
    /// The definition: what a failed first install leaves, what drift correction does.
    pub definition: &'a CompositionDefinitionSpec,
}

/// Whether `template` calls `lookup` in one of its actions (`{{ … }}`), not merely has the word
/// in its text, as argo-cd's CRD descriptions do.
fn calls_lookup(template: &str) -> bool {
    template.split("{{").skip(1).any(|rest| {
        let action = rest.split("}}").next().unwrap_or_default();
        action
            .split(|c: char| !(c.is_alphanumeric() || "_.$".contains(c)))
            .any(|word| word == "lookup")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_looks_up_only_by_calling_lookup_in_an_action() {
        let calls = [
            r#"{{ $v := lookup "apps/v1" "Deployment" .Release.Namespace "x" }}"#,
            r#"{{- if (lookup "v1" "Secret" "" "") }}x{{ end }}"#,
        ];
        for template in calls {
            assert!(calls_lookup(template), "{template}");
        }
        let mentions = [
            "description: concepts during lookup stages",
            "{{ .Values.lookup }} and {{ $lookup }}",
            "{{ .Values.a }} a lookup table }}",
        ];
        for template in mentions {
            assert!(!calls_lookup(template), "{template}");
        }
    }
}
