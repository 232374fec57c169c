//! Where a definition's compositions put their releases, and granting the controllers exactly
//! that: the namespaces compositor creates for releases, and the bundle applied so that a
//! namespace that cannot be granted yet never holds back the rest.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::{Error, objects};
use crate::api::{
    ClusterStatus, DEPENDS_ON, GeneratedResource, MOVE_ANNOTATION, MOVE_CLUSTERS_ANNOTATION,
    MOVE_REFUSED_ANNOTATION, NAMESPACE_OWNER_ANNOTATION, NamespacePlacement, OWNER_ANNOTATION,
    RELEASE_NAME_ANNOTATION, VALUES_FROM, VERSION_LABEL, is_reserved_namespace,
};
use crate::crd::Names;
use crate::rbac::ReleasePlace;

/// How often, and how many times, a version not served yet is looked for again.
const SERVE_POLL: Duration = Duration::from_millis(100);
const SERVE_ATTEMPTS: u32 = 50;

/// One composition, as far as granting its controller goes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct CompositionUse {
    /// Namespace of the composition.
    pub namespace: String,
    /// Name of the composition.
    pub name: String,
    /// Its release name, when valid (the controller reports an invalid one).
    pub release: Option<String>,
    /// UID of the composition.
    pub uid: String,
    /// Whether it is being deleted.
    pub deleting: bool,
    /// The version it was asked to move to, if any.
    pub move_to: Option<String>,
    /// The version that refused it, if any.
    pub move_refused_by: Option<String>,
    /// Whether its owner paused it (it then stays where it is).
    pub paused: bool,
    /// Its `compositor.dev/move-clusters` annotation: the releases a rollout lets move.
    pub move_clusters: Option<String>,
}

impl CompositionUse {
    /// The release namespace under `placement`.
    pub fn release_namespace(&self, placement: NamespacePlacement) -> &str {
        match placement {
            NamespacePlacement::Composition => &self.namespace,
            NamespacePlacement::CompositionName => &self.name,
        }
    }
}

/// The compositions of one version.
#[derive(Clone, Debug, Default)]
pub struct VersionUse {
    /// Every composition of the version.
    pub compositions: BTreeSet<CompositionUse>,
    /// Compositions that moved away but whose release the new version has not taken over yet:
    /// until it has, they may come back (a refused move), so the version stays.
    pub settling: usize,
    /// Each composition's releases as its status records them, by namespace and name.
    pub releases: BTreeMap<(String, String), Vec<ClusterStatus>>,
    /// The other kinds its compositions wait for (`spec.dependsOn`).
    pub depends_on_kinds: BTreeSet<String>,
    /// The namespaces where its compositions take values from a ConfigMap (`spec.valuesFrom`).
    pub values_config_maps: BTreeSet<String>,
}

impl VersionUse {
    /// Where the releases of these compositions go.
    pub fn releases(&self, placement: NamespacePlacement) -> Vec<ReleasePlace> {
        let places: BTreeSet<ReleasePlace> = self
            .compositions
            .iter()
            .filter_map(|composition| {
                Some(ReleasePlace {
                    release: composition.release.clone()?,
                    namespace: composition.release_namespace(placement).to_string(),
                })
            })
            .collect();
        places.into_iter().collect()
    }
}

/// Every composition of the CRD by version label (unlabelled ones belong to `current`).
pub async fn list_compositions(
    client: &Client,
    names: &Names,
    current: &str,
) -> Result<BTreeMap<String, VersionUse>, Error> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&names.group, current, &names.kind),
        &names.plural,
    );
    // Whole objects: the status says which chart each release runs. Read a page at a time, so
    // that thousands of compositions never sit in memory at once.
    let api = Api::<DynamicObject>::all_with(client.clone(), &resource);
    let mut by_version: BTreeMap<String, VersionUse> = BTreeMap::new();
    let mut params = ListParams::default().limit(LIST_PAGE);
    loop {
        let page = list_page(&api, &params).await?;
        for item in page.items {
            count_use(&mut by_version, &item, (&names.kind, current));
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    Ok(by_version)
}

/// Compositions listed per request.
const LIST_PAGE: u32 = 250;

/// One page of compositions. A version just added to an established CRD is served a moment
/// later, so a 404 is asked again for a while.
async fn list_page(
    api: &Api<DynamicObject>,
    params: &ListParams,
) -> Result<kube::core::ObjectList<DynamicObject>, Error> {
    let mut attempts = 0;
    loop {
        match api.list(params).await {
            Err(kube::Error::Api(status)) if status.code == 404 && attempts < SERVE_ATTEMPTS => {
                attempts += 1;
                tokio::time::sleep(SERVE_POLL).await;
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {
                return Err(Error::Waiting("the CRD's new version to be served"));
            }
            listed => return listed.map_err(|e| Error::Kube("list compositions", e)),
        }
    }
}

/// Counts `item` in the use of its version (unlabelled, `current`'s), and as settling in the
/// version whose chart its release still runs.
fn count_use(
    by_version: &mut BTreeMap<String, VersionUse>,
    item: &DynamicObject,
    (kind, current): (&str, &str),
) {
    let version = item
        .labels()
        .get(VERSION_LABEL)
        .cloned()
        .unwrap_or_else(|| current.to_string());
    let installed = item.data["status"]["chart"]["version"].as_str();
    if let Some(installed_version) = installed.and_then(|v| crate::crd::version_name(v).ok())
        && installed_version != version
    {
        by_version.entry(installed_version).or_default().settling += 1;
    }
    let annotation = item.annotations().get(RELEASE_NAME_ANNOTATION);
    let release = crate::api::release_name(annotation.map(String::as_str), &item.name_any());
    let used = by_version.entry(version).or_default();
    let key = (item.namespace().unwrap_or_default(), item.name_any());
    let recorded = serde_json::from_value(item.data["status"]["clusters"].clone());
    used.releases.insert(key, recorded.unwrap_or_default());
    let needs = item.data["spec"][DEPENDS_ON]
        .as_array()
        .into_iter()
        .flatten();
    let kinds = needs
        .filter_map(|need| need["kind"].as_str())
        .filter(|needed| *needed != kind);
    used.depends_on_kinds.extend(kinds.map(str::to_string));
    let sources = item.data["spec"][VALUES_FROM]
        .as_array()
        .into_iter()
        .flatten();
    if sources
        .into_iter()
        .any(|source| source["kind"] == "ConfigMap")
    {
        let namespace = item.namespace().unwrap_or_default();
        used.values_config_maps.insert(namespace);
    }
    used.compositions.insert(CompositionUse {
        namespace: item.namespace().unwrap_or_default(),
        name: item.name_any(),
        release: release.ok(),
        uid: item.uid().unwrap_or_default(),
        deleting: item.metadata.deletion_timestamp.is_some(),
        move_to: item.annotations().get(MOVE_ANNOTATION).cloned(),
        move_refused_by: item.annotations().get(MOVE_REFUSED_ANNOTATION).cloned(),
        paused: crate::api::is_paused(&item.metadata),
        move_clusters: item.annotations().get(MOVE_CLUSTERS_ANNOTATION).cloned(),
    });
}

/// The plurals of the composition kinds of `resource`'s group, other than its own, that
/// `kinds` names: what its controller reads to know when the compositions its own wait for are
/// Ready. A kind the group does not serve is left out (the controller says so on the
/// composition that names it).
pub async fn dependency_plurals(
    client: &Client,
    resource: &GeneratedResource,
    kinds: &BTreeSet<String>,
) -> Result<BTreeSet<String>, Error> {
    if kinds.is_empty() {
        return Ok(BTreeSet::new());
    }
    let group = kube::discovery::group(client, &resource.group)
        .await
        .map_err(|e| Error::Bundles("discover the composition kinds of the group", e))?;
    // The kinds of a group of generated CRDs are served at versions of their own.
    let named = group
        .resources_by_stability()
        .into_iter()
        .filter(|(found, _)| kinds.contains(&found.kind))
        .map(|(found, _)| found.plural)
        .filter(|plural| *plural != resource.plural);
    // A definition may name a group that other CRDs share: only a kind whose CRD compositor
    // generated is a composition, and only compositions are ever read for a need.
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let mut plurals = BTreeSet::new();
    for plural in named {
        let crd = format!("{plural}.{}", resource.group);
        let found = crds
            .get_metadata_opt(&crd)
            .await
            .map_err(|e| Error::Bundles("read a CRD that compositions wait for", e))?;
        if found.is_some_and(|crd| crd.annotations().contains_key(OWNER_ANNOTATION)) {
            plurals.insert(plural);
        }
    }
    Ok(plurals)
}

/// The namespaces of compositions placed in a namespace of their own.
#[derive(Debug, Default)]
pub struct OwnNamespaces {
    /// Those made for their composition: only there is anything granted.
    pub made: BTreeSet<String>,
    /// Every one asked for, made for its composition or not.
    pub asked: BTreeSet<String>,
    /// Why some are not granted.
    pub warnings: Vec<String>,
}

/// Makes the namespace of each composition placed in a namespace of its own, marked as made for
/// it. A namespace that exists already is the composition's only if it was made for it: one
/// that was there before, or made for another composition of the same name, is someone else's,
/// and so is a reserved one (Kubernetes' own and `reserved`); nothing is granted there and the
/// controller says so on the composition. One list of the namespaces compositor made, then a
/// create for each one missing.
pub async fn ensure_release_namespaces(
    client: &Client,
    compositions: &VersionUse,
    reserved: &[&str],
) -> OwnNamespaces {
    let api = Api::<Namespace>::all(client.clone());
    let mut own = OwnNamespaces::default();
    let made_for: BTreeMap<String, String> = match api
        .list_metadata(&ListParams::default().labels(MANAGED_BY))
        .await
    {
        Ok(listed) => listed
            .items
            .into_iter()
            .map(|namespace| {
                let uid = namespace
                    .annotations()
                    .get(NAMESPACE_OWNER_ANNOTATION)
                    .cloned();
                (namespace.name_any(), uid.unwrap_or_default())
            })
            .collect(),
        Err(error) => {
            let error = crate::runtime::error_message(&error);
            own.warnings.push(format!(
                "cannot list the namespaces compositor made: {error}"
            ));
            return own;
        }
    };
    for composition in &compositions.compositions {
        let name = &composition.name;
        let owner = format!("{}/{}", composition.namespace, composition.name);
        own.asked.insert(name.clone());
        if is_reserved_namespace(name, reserved) {
            own.warnings.push(format!(
                "{owner}: namespace {name} is reserved and is never a composition's own"
            ));
            continue;
        }
        match made_for.get(name) {
            Some(uid) if *uid == composition.uid => {
                own.made.insert(name.clone());
            }
            Some(_) => own.warnings.push(format!(
                "{owner}: namespace {name} was made for another composition; nothing is granted there"
            )),
            None if composition.deleting => {}
            None => match create_namespace(&api, composition).await {
                Ok(true) => {
                    own.made.insert(name.clone());
                }
                Ok(false) => own.warnings.push(format!(
                    "{owner}: namespace {name} existed before and is not the composition's; nothing is granted there"
                )),
                Err(error) => own.warnings.push(format!(
                    "cannot create namespace {name} for {owner}: {}",
                    crate::runtime::error_message(&error)
                )),
            },
        }
    }
    own
}

/// The label on every namespace compositor makes.
const MANAGED_BY: &str = "app.kubernetes.io/managed-by=compositor";

/// Creates `composition`'s own namespace, marked as made for it; `false` when a namespace of
/// that name exists already.
async fn create_namespace(
    api: &Api<Namespace>,
    composition: &CompositionUse,
) -> Result<bool, kube::Error> {
    let namespace: Namespace = serde_json::from_value(json!({
        "metadata": {
            "name": composition.name,
            "labels": {"app.kubernetes.io/managed-by": "compositor"},
            "annotations": {NAMESPACE_OWNER_ANNOTATION: composition.uid},
        }
    }))
    .map_err(kube::Error::SerdeError)?;
    match api.create(&PostParams::default(), &namespace).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(error) => Err(error),
    }
}

/// Applies `objects` in order. A Role, RoleBinding or release identity in a namespace other
/// than the definition's that cannot be applied (the namespace does not exist, or is being
/// deleted) is a warning, not a failure: it concerns only what may happen there.
pub async fn apply_objects(
    client: &Client,
    objects: Vec<DynamicObject>,
    definition_namespace: &str,
) -> Result<Vec<String>, Error> {
    let mut warnings = Vec::new();
    for object in objects {
        let kind = object
            .types
            .as_ref()
            .map(|t| t.kind.clone())
            .unwrap_or_default();
        let namespace = object.namespace();
        let elsewhere = matches!(kind.as_str(), "Role" | "RoleBinding" | "ServiceAccount")
            && namespace.as_deref() != Some(definition_namespace);
        match objects::apply(client, object).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if elsewhere && matches!(status.code, 403 | 404) => {
                warnings.push(format!(
                    "the controller gets no {kind} in namespace {} yet: {}; retrying",
                    namespace.unwrap_or_default(),
                    status.message
                ));
            }
            Err(error) => return Err(Error::Bundles("apply bundle", error)),
        }
    }
    Ok(warnings)
}

/// Of the grant lines `needed` (see [`crate::rbac::approval`]), those an administrator has
/// not approved: the operator may not `approve` them (one SelfSubjectAccessReview each, which
/// every authenticated user may ask).
pub async fn unapproved(
    client: &Client,
    needed: BTreeSet<String>,
) -> Result<Vec<String>, kube::Error> {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let reviews = Api::<SelfSubjectAccessReview>::all(client.clone());
    let mut missing = Vec::new();
    for line in needed {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(crate::api::GROUP.to_string()),
                    resource: Some(crate::rbac::GRANTS_RESOURCE.to_string()),
                    verb: Some(crate::rbac::APPROVE_VERB.to_string()),
                    name: Some(line.clone()),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        let answer = reviews.create(&PostParams::default(), &review).await?;
        if !answer.status.is_some_and(|status| status.allowed) {
            missing.push(line);
        }
    }
    Ok(missing)
}
