//! The controller bundles of a definition: one per served version (the current one, and each
//! earlier one that compositions still carry), granted what its chart writes where its
//! compositions' releases go; then every bundle object of the definition no longer desired goes.

use std::collections::{BTreeMap, BTreeSet};

use super::claims;
use super::footprint::Unserved;
use super::grants::{self, VersionUse};
use super::inputs::{
    self, chart_footprint, namespace_of, referenced_config_maps, referenced_secrets,
};
use super::objects::{self, DesiredKey};
use super::{Context, Error, moves};
use crate::api::GeneratedResource;
use crate::api::{
    ClusterPlacement, CompositionDefinition, DEFINITION_LABEL, DefinitionVersion, DriftWatch,
    NamespacePlacement, VersionFootprint,
};
use crate::chart::Fetched;
use crate::definition::bundle::{
    self, Controller as ControllerBundle, Footprint, Permissions, definition_label,
};
use crate::rbac::ReleasePlace;

/// What a definition serves once its bundles are applied.
#[derive(Default)]
pub(super) struct Served {
    /// Each served version, current first, for the status.
    pub versions: Vec<DefinitionVersion>,
    /// What could not be granted yet (a chart that does not render, namespaces that do not
    /// exist); while there is any, the definition is looked at again soon.
    pub warnings: Vec<String>,
    /// Kinds the charts write that the cluster does not serve, one line each.
    pub unserved: BTreeSet<String>,
    /// When a chart's footprint that missed something is learnt again, the soonest.
    pub retry_at: Option<std::time::Instant>,
}

/// What a definition's bundles are granted for: its compositions, by version, how each older
/// version's schema breaks against the current one, and the cluster Secrets its placement
/// selects.
pub(super) struct Grants<'a> {
    /// Every composition by its version label.
    pub by_version: &'a BTreeMap<String, VersionUse>,
    /// Per older version, what the current schema refuses of it (empty: compatible).
    pub breaks: &'a BTreeMap<String, Vec<String>>,
    /// The registration Secrets every version's controller may read, by name; `None` when the
    /// definition places on the management cluster only.
    pub cluster_secrets: Option<&'a BTreeSet<String>>,
}

/// Applies the bundle of `current` (chart `fetched`) and of every version in `known` that
/// compositions still carry, then deletes the definition's bundle objects of any other version.
pub(super) async fn apply(
    definition: &CompositionDefinition,
    context: &Context,
    current: &GeneratedResource,
    fetched: &Fetched,
    known: &[DefinitionVersion],
    compositions: Grants<'_>,
) -> Result<Served, Error> {
    let mut served = Served::default();
    let mut desired = BTreeSet::new();
    for serving in served_versions(definition, current, fetched, known, &compositions) {
        let chart = if serving.chart_version == fetched.version {
            fetched.clone()
        } else {
            inputs::fetch_served(definition, context, &serving).await?
        };
        let DefinitionVersion {
            version,
            chart_version,
            archive_url,
            ..
        } = serving;
        let mut used = compositions
            .by_version
            .get(&version)
            .cloned()
            .unwrap_or_default();
        let count = used.compositions.len() as i64;
        if version == current.version {
            let arriving = moves::movable(compositions.by_version, compositions.breaks, &version);
            used.compositions.extend(arriving.cloned());
        }
        let resource = GeneratedResource {
            version: version.clone(),
            ..current.clone()
        };
        let grants = VersionGrants {
            used: &used,
            cluster_secrets: compositions.cluster_secrets,
        };
        let applied = apply_version(
            definition,
            context,
            resource,
            &chart,
            &chart_version,
            grants,
        )
        .await?;
        desired.extend(applied.keys);
        served.warnings.extend(applied.warnings);
        served
            .unserved
            .extend(applied.unserved.iter().map(ToString::to_string));
        served.retry_at = served.retry_at.into_iter().chain(applied.retry_at).min();
        let breaks = compositions.breaks.get(&version);
        served.versions.push(DefinitionVersion {
            version,
            chart_version,
            archive_url,
            controller: applied.controller,
            compositions: count,
            compatible: breaks.is_some_and(Vec::is_empty),
            breaks: breaks.cloned().unwrap_or_default(),
            footprint: Some(applied.footprint),
        });
    }
    let selector = format!("{DEFINITION_LABEL}={}", definition_label(definition));
    objects::delete_stale(
        &context.client,
        &bundle::bundle_kinds(),
        &selector,
        &desired,
    )
    .await
    .map_err(|e| Error::Bundles("delete stale bundles", e))?;
    Ok(served)
}

/// The versions to serve, with their chart versions (and archives): `current`, and every
/// version in `known` that compositions still carry.
fn served_versions(
    definition: &CompositionDefinition,
    current: &GeneratedResource,
    fetched: &Fetched,
    known: &[DefinitionVersion],
    compositions: &Grants<'_>,
) -> Vec<DefinitionVersion> {
    let older = known.iter().filter(|known| {
        known.version != current.version && compositions.by_version.contains_key(&known.version)
    });
    let now = DefinitionVersion {
        version: current.version.clone(),
        chart_version: fetched.version.clone(),
        archive_url: inputs::archive_of(definition, fetched),
        ..DefinitionVersion::default()
    };
    std::iter::once(now).chain(older.cloned()).collect()
}

/// One version's applied bundle.
struct Applied {
    /// Its controller's name.
    controller: String,
    /// What its chart writes, for the status.
    footprint: VersionFootprint,
    /// Its objects.
    keys: Vec<DesiredKey>,
    /// What could not be granted yet.
    warnings: Vec<String>,
    /// Kinds its chart writes that the cluster does not serve.
    unserved: Vec<Unserved>,
    /// When its chart's footprint is learnt again, if it missed something.
    retry_at: Option<std::time::Instant>,
}

/// What one version's bundle is granted for.
struct VersionGrants<'a> {
    /// Its compositions, whose releases go where the controller may write.
    used: &'a VersionUse,
    /// The registration Secrets the controller may read, by name.
    cluster_secrets: Option<&'a BTreeSet<String>>,
}

/// Applies the bundle of `resource`'s version, chart `chart` at `chart_version`, granted where
/// the releases of its compositions go and the cluster Secrets the placement selects.
async fn apply_version(
    definition: &CompositionDefinition,
    context: &Context,
    resource: GeneratedResource,
    chart: &Fetched,
    chart_version: &str,
    VersionGrants {
        used,
        cluster_secrets,
    }: VersionGrants<'_>,
) -> Result<Applied, Error> {
    let placement = definition.spec.placement.namespace;
    let footprint = chart_footprint(context, chart).await;
    let mut warnings = footprint.warnings.clone();
    let mut releases = used.releases(placement);
    let mut asked_namespaces = BTreeSet::new();
    if placement == NamespacePlacement::CompositionName {
        let definition_namespace = namespace_of(definition);
        let reserved = [
            definition_namespace.as_str(),
            context.config.clusters_namespace.as_str(),
        ];
        let own = grants::ensure_release_namespaces(&context.client, used, &reserved).await;
        releases.retain(|place| own.made.contains(&place.namespace));
        asked_namespaces = own.asked;
        warnings.extend(own.warnings);
    }
    let dependencies =
        grants::dependency_plurals(&context.client, &resource, &used.depends_on_kinds).await?;
    let claims = claims::check(&context.client, &footprint.footprint, releases).await;
    let releases = claims.kept;
    warnings.extend(claims.refused);
    let operator = match footprint.footprint.bindings.is_empty() {
        true => None,
        false => Some(
            context
                .operator_username()
                .await
                .map_err(|e| Error::Bundles("ask the operator's own username", e))?,
        ),
    };
    let controller = controller_bundle(
        definition,
        context,
        resource,
        chart_version,
        &footprint.footprint,
        Granted {
            releases,
            asked_namespaces,
            cluster_secrets,
            operator,
            dependencies,
            values_config_maps: used.values_config_maps.clone(),
        },
    )?;
    let bundle = controller.bundle(definition).map_err(Error::Bundle)?;
    let mut needed = bundle.grants_needing_approval(&definition_ref(definition));
    needed.extend(
        footprint
            .footprint
            .aggregation_lines(&definition_ref(definition)),
    );
    require_approval(context, &controller.resource.version, needed).await?;
    let objects = bundle.objects().map_err(Error::Bundle)?;
    let keys = objects.iter().map(objects::key).collect();
    warnings
        .extend(grants::apply_objects(&context.client, objects, &namespace_of(definition)).await?);
    Ok(Applied {
        controller: controller.name(),
        footprint: footprint.footprint.summary(),
        keys,
        warnings,
        unserved: footprint.unserved,
        retry_at: footprint.retry_at,
    })
}

/// Where one version's controller may act: its releases, the release namespaces compositions
/// asked for, and the registration Secrets it reads.
struct Granted<'a> {
    releases: Vec<ReleasePlace>,
    asked_namespaces: BTreeSet<String>,
    cluster_secrets: Option<&'a BTreeSet<String>>,
    /// The operator's username, when the chart binds subjects that need approval.
    operator: Option<String>,
    /// The plurals of the other composition kinds its compositions wait for.
    dependencies: BTreeSet<String>,
    /// The namespaces where compositions take values from a ConfigMap.
    values_config_maps: BTreeSet<String>,
}

/// The bundle description of `resource`'s version, chart `chart_version` writing `footprint`.
fn controller_bundle(
    definition: &CompositionDefinition,
    context: &Context,
    resource: GeneratedResource,
    chart_version: &str,
    footprint: &Footprint,
    granted: Granted<'_>,
) -> Result<ControllerBundle, Error> {
    let spec = &definition.spec;
    Ok(ControllerBundle {
        resource,
        chart_version: chart_version.to_string(),
        image: context.config.controller_image.clone(),
        allow_cross_namespace_refs: context.config.allow_cross_namespace_refs,
        dependents_timeout_seconds: context.config.dependents_timeout_seconds,
        permissions: Permissions {
            clusters_namespace: (spec.placement.clusters != ClusterPlacement::Local)
                .then(|| context.config.clusters_namespace.clone()),
            cluster_secrets: granted.cluster_secrets.cloned().unwrap_or_default(),
            footprint: footprint.clone(),
            releases: granted.releases,
            listed_namespaces: spec.permissions.namespaces.iter().cloned().collect(),
            owns_namespaces: spec.placement.namespace == NamespacePlacement::CompositionName,
            asked_namespaces: granted.asked_namespaces,
            secrets: referenced_secrets(definition, context)?,
            config_maps: referenced_config_maps(definition),
            watch_everywhere: spec.drift.watch == DriftWatch::Cluster,
            operator: granted.operator,
            dependencies: granted.dependencies,
            values_config_maps: granted.values_config_maps,
        },
    })
}

/// Asks, before the CRD version is applied, for the approval of what its controller would be
/// granted once compositions exist: the bundle as it would be for one release, whose name and
/// namespace stay placeholders, and the chart's aggregated ClusterRoles. Lines that name a
/// release's own objects can be approved only per release, so they are asked when that release
/// exists ([`apply`]); those of the chart's bindings to subjects that need approval and of its
/// aggregations keep their patterns, and are asked now.
pub(super) async fn approve_ahead(
    definition: &CompositionDefinition,
    context: &Context,
    resource: &GeneratedResource,
    fetched: &Fetched,
    footprint: &Footprint,
    cluster_secrets: Option<&BTreeSet<String>>,
) -> Result<(), Error> {
    let any_release = ReleasePlace {
        release: crate::rbac::RELEASE.to_string(),
        namespace: crate::rbac::NAMESPACE.to_string(),
    };
    let controller = controller_bundle(
        definition,
        context,
        resource.clone(),
        &fetched.version,
        footprint,
        Granted {
            releases: vec![any_release],
            asked_namespaces: BTreeSet::new(),
            cluster_secrets,
            operator: None,
            dependencies: BTreeSet::new(),
            values_config_maps: BTreeSet::new(),
        },
    )?;
    let bundle = controller.bundle(definition).map_err(Error::Bundle)?;
    let definition = definition_ref(definition);
    let mut needed = bundle.grants_needing_approval(&definition);
    needed.retain(|line| {
        !line.contains(crate::rbac::RELEASE) && !line.contains(crate::rbac::NAMESPACE)
    });
    // A binding's line keeps its patterns: it is approved once for every release; so does an
    // aggregated role's, which names it and its selectors.
    needed.extend(bundle.binding_grants(&definition));
    needed.extend(footprint.aggregation_lines(&definition));
    require_approval(context, &resource.version, needed).await
}

/// Fails with [`Error::ApprovalRequired`] unless every line of `needed` is approved.
async fn require_approval(
    context: &Context,
    version: &str,
    needed: BTreeSet<String>,
) -> Result<(), Error> {
    let grants = grants::unapproved(&context.client, needed)
        .await
        .map_err(|e| Error::Bundles("review approvals", e))?;
    if grants.is_empty() {
        return Ok(());
    }
    Err(Error::ApprovalRequired {
        version: version.to_string(),
        grants,
        resource: crate::rbac::GRANTS_RESOURCE,
        group: crate::api::GROUP,
    })
}

/// `namespace/name` of the definition, as grant lines name it.
fn definition_ref(definition: &CompositionDefinition) -> String {
    crate::definition::bundle::definition_key(definition).to_string()
}
