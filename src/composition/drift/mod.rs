//! Drift: what a release rendered stays as rendered.
//!
//! `watches` notices, from metadata-only watches of the kinds releases render, an object of a
//! release that was deleted or whose fields someone else changed, and has its composition
//! reconciled with it as a suspect. When the release is otherwise up to date, [`settle`] looks
//! at each suspect: what Helm recorded for the deployed revision is applied as a dry run (as
//! Helm applies it: server-side, as field manager `helm`, as the release identity), and the
//! fields where the live object differs are the drift (`fields`). The definition's
//! `spec.drift` says what then happens: the same apply for real (`Correct`), no write
//! (`Report`), or nothing at all (`Ignore`). Helm's record is never written and no revision is
//! made; an object corrected again and again within the conflict window ([`Corrections`]) is left as it is, as a
//! `DriftConflict` naming the other writer, but for a role or binding, which is restored once
//! more first: a widened grant is never what is left. The watch event of a correction's own write is no
//! drift (`own_writes`), so a correction costs one reconcile, not two.

mod connections;
mod corrections;
mod fields;
mod own_writes;
mod seen;
mod start;
mod stream;
mod watches;

pub(super) use corrections::Corrections;
pub(super) use start::{judge_now, watch};
pub(super) use stream::{Reads, Watched};
pub(super) use watches::Watches;

use std::collections::BTreeSet;
use std::fmt;

use kube::api::{Api, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::Error;
use super::inputs::TargetRelease;
use super::reach::Reach;
use crate::api::{ClusterStatus, DRIFT_ANNOTATION, DriftMode, DriftSpec, ResourceRef};
use crate::helm::{self, RenderedDocument, parse_documents};
use crate::rbac::TypeRef;

/// One object that differs from what its release applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Finding {
    /// `Kind namespace/name`, or `Kind name` for a cluster-scoped object.
    pub object: String,
    /// The JSON pointers of the fields that differ; empty when the object was deleted.
    pub paths: Vec<String>,
    /// Who else owns those fields.
    pub managers: BTreeSet<String>,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.paths.is_empty() {
            return write!(f, "{} deleted", self.object);
        }
        write!(f, "{} changed at {}", self.object, self.paths.join(", "))?;
        match self.managers.is_empty() {
            true => Ok(()),
            false => {
                let managers: Vec<&str> = self.managers.iter().map(String::as_str).collect();
                write!(f, " by {}", managers.join(", "))
            }
        }
    }
}

/// What one look at a release's suspects found and did.
#[derive(Debug, Default)]
pub(super) struct Settled {
    /// The objects looked at.
    pub checked: BTreeSet<String>,
    /// Drift put right.
    pub corrected: Vec<Finding>,
    /// Drift found and left as it is (`Report`).
    pub reported: Vec<Finding>,
}

impl Settled {
    /// The drift lines of a target after this look, which had `before`: one per object, the
    /// latest found. A line of drift left as it is goes once its object is found as rendered;
    /// one of drift restored (`; restored`) stays until its object drifts again.
    pub fn drifted(&self, before: &[String]) -> Vec<String> {
        let found: BTreeSet<&String> = (self.reported.iter().chain(&self.corrected))
            .map(|finding| &finding.object)
            .collect();
        let of = |objects: &BTreeSet<&String>, line: &String| {
            objects
                .iter()
                .any(|object| line.starts_with(&format!("{object} ")))
        };
        let checked: BTreeSet<&String> = self.checked.iter().collect();
        let kept = before.iter().filter(|line| {
            let restored = line.ends_with(RESTORED);
            !of(&found, line) && (restored || !of(&checked, line))
        });
        let reported = self.reported.iter().map(ToString::to_string);
        let corrected = self.corrected.iter().map(|f| format!("{f}{RESTORED}"));
        kept.cloned().chain(reported).chain(corrected).collect()
    }
}

/// Ends the drift line of an object put back.
const RESTORED: &str = "; restored";

/// The drift mode of `composition`: its definition's, or less active when the composition's
/// [`DRIFT_ANNOTATION`] says so.
pub(super) fn mode(spec: &DriftSpec, composition: &DynamicObject) -> Result<DriftMode, Error> {
    let Some(value) = composition.annotations().get(DRIFT_ANNOTATION) else {
        return Ok(spec.mode);
    };
    let asked = DriftMode::parse(value).ok_or_else(|| {
        Error::InvalidAnnotation(format!(
            "annotation {DRIFT_ANNOTATION} is {value:?}: it may be Report or Ignore (or Correct, \
             which changes nothing)"
        ))
    })?;
    Ok(asked.max(spec.mode))
}

/// The suspects of `release` (deployed as `revision`) compared with what Helm recorded, and
/// settled as `policy` says.
pub(super) async fn settle(
    release: &TargetRelease<'_>,
    revision: u64,
    suspects: BTreeSet<ResourceRef>,
    policy: &DriftSpec,
) -> Result<Settled, Error> {
    let mut settled = Settled::default();
    let mode = mode(policy, release.object)?;
    if mode == DriftMode::Ignore || suspects.is_empty() {
        return Ok(settled);
    }
    let (reach, target) = (release.reach, release.target);
    let manifest =
        helm::recorded_manifest(&reach.client, &target.namespace, &target.release, revision)
            .await
            .map_err(|e| Error::Drift(e.to_string()))?
            .unwrap_or_default();
    let documents = parse_documents(&manifest)?;
    let applier = applier(release)?;
    let uid = release.object.metadata.uid.clone().unwrap_or_default();
    for suspect in suspects {
        let Some(document) = rendered(&documents, &suspect, &target.namespace) else {
            continue;
        };
        let (resource, namespace) = resource_of(reach, &suspect, &target.namespace).await?;
        let object = Object {
            document,
            reader: api(&reach.client, &resource, namespace.as_deref()),
            applier: api(&applier, &resource, namespace.as_deref()),
            ignored: policy.ignored(&suspect.kind, &suspect.name),
            description: describe(document, namespace.as_deref()),
        };
        settled.checked.insert(object.description.clone());
        let Some((finding, live)) = object.look(release).await? else {
            continue;
        };
        if mode == DriftMode::Report {
            settled.reported.push(finding);
            continue;
        }
        if release
            .context
            .drift
            .corrections
            .too_many(&uid, &finding.object)
        {
            // A role or binding is never left as the other writer made it, which may grant
            // anything: it is restored once more, and the fight is left to whoever the
            // conflict names.
            if grants_rights(document) {
                object.correct(release, live.as_ref()).await?;
            }
            return Err(Error::DriftConflict(finding.to_string()));
        }
        object.correct(release, live.as_ref()).await?;
        settled.corrected.push(finding);
    }
    Ok(settled)
}

/// Whether `document` is RBAC: a role or a binding, whose drift is a change of who may do what.
fn grants_rights(document: &RenderedDocument) -> bool {
    document
        .object
        .api_version
        .starts_with("rbac.authorization.k8s.io/")
}

/// One suspect of a release: what Helm recorded of it and how it is read and applied.
struct Object<'a> {
    document: &'a RenderedDocument,
    /// Reads it, as the controller.
    reader: Api<DynamicObject>,
    /// Applies it, as Helm does.
    applier: Api<DynamicObject>,
    /// JSON pointers left alone.
    ignored: Vec<String>,
    /// `Kind namespace/name`.
    description: String,
}

impl Object<'_> {
    /// What differs: deleted, or the fields a dry run of the release's apply would change;
    /// with the live object.
    async fn look(
        &self,
        release: &TargetRelease<'_>,
    ) -> Result<Option<(Finding, Option<Value>)>, Error> {
        let name = &self.document.object.name;
        let Some(live) = self.reader.get_opt(name).await.map_err(kube_error)? else {
            let finding = Finding {
                object: self.description.clone(),
                paths: Vec::new(),
                managers: BTreeSet::new(),
            };
            return Ok(Some((finding, None)));
        };
        let live = serde_json::to_value(&live).unwrap_or_default();
        let applied = self.apply(release, Some(&live), true).await?;
        let paths = fields::drifted_paths(&applied, &live, &self.ignored);
        if paths.is_empty() {
            return Ok(None);
        }
        let finding = Finding {
            object: self.description.clone(),
            managers: fields::managers_of(&live, &paths),
            paths,
        };
        Ok(Some((finding, Some(live))))
    }

    /// Applies what Helm recorded, telling the drift watches that the event of this write is
    /// the controller's own.
    async fn correct(
        &self,
        release: &TargetRelease<'_>,
        live: Option<&Value>,
    ) -> Result<(), Error> {
        let watches = &release.context.drift;
        let cluster = &release.target.cluster;
        // A deleted object comes back with a new UID, whose first event is no change anyway.
        let uid = live.and_then(|live| live["metadata"]["uid"].as_str());
        if let Some(uid) = uid {
            watches.correcting(cluster, uid);
        }
        let applied = self.apply(release, live, false).await;
        if let Some(uid) = uid {
            let written = applied.as_ref().ok();
            let version = written.and_then(|o| o["metadata"]["resourceVersion"].as_str());
            watches.corrected(cluster, uid, version);
        }
        applied.map(drop)
    }

    /// Applies what Helm recorded (with the ignored fields as they are live), as Helm does; a
    /// dry run changes nothing. What the object would be, or now is.
    async fn apply(
        &self,
        release: &TargetRelease<'_>,
        live: Option<&Value>,
        dry_run: bool,
    ) -> Result<Value, Error> {
        let target = release.target;
        let mut body = self.document.body.clone();
        let metadata = &mut body["metadata"];
        // Helm adds these as it applies: an apply without them would take them away.
        metadata["labels"]["app.kubernetes.io/managed-by"] = json!("Helm");
        metadata["annotations"][helm::RELEASE_NAME_ANNOTATION] = json!(target.release);
        metadata["annotations"][helm::RELEASE_NAMESPACE_ANNOTATION] = json!(target.namespace);
        if let Some(live) = live {
            body = fields::keep_ignored(&body, live, &self.ignored);
        }
        let mut params = PatchParams::apply(fields::HELM_MANAGER).force();
        params.dry_run = dry_run;
        let name = &self.document.object.name;
        let applied = self
            .applier
            .patch(name, &params, &Patch::Apply(&body))
            .await
            .map_err(kube_error)?;
        Ok(serde_json::to_value(&applied).unwrap_or_default())
    }
}

/// The entry to record of a target whose release is up to date (`entry`, or none when the
/// `recorded` one stands), with the drift lines after `settled`.
pub(super) fn with_lines(
    entry: Option<ClusterStatus>,
    recorded: Option<&ClusterStatus>,
    settled: &Settled,
) -> Option<ClusterStatus> {
    let before = recorded.map(|c| c.drifted.as_slice()).unwrap_or_default();
    let drifted = settled.drifted(before);
    if drifted == before {
        return entry;
    }
    let entry = entry.or_else(|| recorded.cloned())?;
    Some(ClusterStatus { drifted, ..entry })
}

/// The objects of `resources` that are not there; a namespaced one without a namespace is
/// looked for in `namespace`.
pub(super) async fn missing(
    reach: &Reach,
    resources: &[ResourceRef],
    namespace: &str,
) -> Result<BTreeSet<ResourceRef>, Error> {
    let mut missing = BTreeSet::new();
    for object in resources {
        let (resource, in_namespace) = resource_of(reach, object, namespace).await?;
        let found = api(&reach.client, &resource, in_namespace.as_deref())
            .get_metadata_opt(&object.name)
            .await
            .map_err(|e| Error::Kube("look for a rendered object", e))?;
        if found.is_none() {
            missing.insert(object.clone());
        }
    }
    Ok(missing)
}

/// The resource of `object`'s kind and, when it is namespaced, its namespace (`namespace` when
/// it names none). The cluster's kinds as discovery found them before: no discovery request
/// per object.
async fn resource_of(
    reach: &Reach,
    object: &ResourceRef,
    namespace: &str,
) -> Result<(ApiResource, Option<String>), Error> {
    let kind = TypeRef {
        api_version: object.api_version.clone(),
        kind: object.kind.clone(),
    };
    let found = reach
        .kinds
        .resolve(&reach.client, &kind)
        .await
        .map_err(|e| Error::Kube("discover rendered kind", e))?;
    let resource = ApiResource {
        group: found.group,
        version: kind.version().to_string(),
        api_version: object.api_version.clone(),
        kind: object.kind.clone(),
        plural: found.plural,
    };
    let namespace = found.namespaced.then(|| {
        object
            .namespace
            .clone()
            .unwrap_or_else(|| namespace.to_string())
    });
    Ok((resource, namespace))
}

fn api(client: &Client, resource: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, resource),
        None => Api::all_with(client.clone(), resource),
    }
}

/// The document of `suspect` in the recorded manifest.
fn rendered<'a>(
    documents: &'a [RenderedDocument],
    suspect: &ResourceRef,
    namespace: &str,
) -> Option<&'a RenderedDocument> {
    let group = |api_version: &str| api_version.rsplit_once('/').map(|(g, _)| g.to_string());
    documents.iter().find(|d| {
        let object = &d.object;
        !d.is_hook()
            && !d.is_chart_crd()
            && object.kind == suspect.kind
            && object.name == suspect.name
            && group(&object.api_version) == group(&suspect.api_version)
            && (suspect.namespace.is_none()
                || object.namespace.as_deref().unwrap_or(namespace)
                    == suspect.namespace.as_deref().unwrap_or(namespace))
    })
}

/// `Kind namespace/name`, or `Kind name`.
fn describe(document: &RenderedDocument, namespace: Option<&str>) -> String {
    let object = &document.object;
    match namespace {
        Some(namespace) => format!("{} {namespace}/{}", object.kind, object.name),
        None => format!("{} {}", object.kind, object.name),
    }
}

fn kube_error(error: kube::Error) -> Error {
    Error::Kube("settle drift", error)
}

/// Who applies a correction: on the management cluster the release identity, as Helm runs
/// there; on a registered cluster the identity its Secret gives, as Helm has there too.
fn applier(release: &TargetRelease<'_>) -> Result<Client, Error> {
    let reach = release.reach;
    if !reach.is_local() {
        return Ok(reach.client.clone());
    }
    let context = release.context;
    let mut config = (*reach.config).clone();
    config.auth_info.impersonate = Some(context.release_identity(&release.target.namespace));
    crate::runtime::client(config, context.metrics.clone())
        .map_err(|e| Error::Drift(format!("a client as the release identity: {e}")))
}

#[cfg(test)]
mod tests;
