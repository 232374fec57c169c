//! A definition going away: with `Delete`, its compositions first (their controllers uninstall
//! the releases), then its controllers' bundles, then the CRD if no other definition serves it;
//! with `Orphan`, only the bundles.

use std::collections::BTreeSet;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};

use super::{Context, Error, objects};
use crate::api::NameOverrides;
use crate::api::{CompositionDefinition, DEFINITION_LABEL, DeletionPolicy};
use crate::crd::Names;
use crate::definition::bundle::{self, definition_label};

/// Deletion: with `Delete`, compositions go first (their controllers uninstall the releases),
/// then the bundles, then the CRD if no other definition serves it; with `Orphan`, only the
/// bundles go.
pub(super) async fn cleanup(
    definition: &CompositionDefinition,
    context: &Context,
) -> Result<Action, Error> {
    let crd_status = definition.status.as_ref().and_then(|s| s.crd.clone());
    if definition.spec.deletion_policy == DeletionPolicy::Delete
        && let Some(crd_status) = &crd_status
    {
        let names = Names::new(
            &crd_status.kind,
            &NameOverrides {
                group: Some(crd_status.group.clone()),
                kind: Some(crd_status.kind.clone()),
                plural: Some(crd_status.plural.clone()),
                short_names: Vec::new(),
            },
        )?;
        let crd_api = Api::<CustomResourceDefinition>::all(context.client.clone());
        if crd_api
            .get_opt(&crd_status.name)
            .await
            .map_err(|e| Error::Kube("read CRD", e))?
            .is_some()
        {
            let remaining =
                delete_compositions(&context.client, &names, &crd_status.stored_version).await?;
            if remaining > 0 {
                return Err(Error::CompositionsRemaining(remaining));
            }
        }
    }
    let selector = format!("{DEFINITION_LABEL}={}", definition_label(definition));
    objects::delete_stale(
        &context.client,
        &bundle::bundle_kinds(),
        &selector,
        &BTreeSet::new(),
    )
    .await
    .map_err(|e| Error::Kube("delete bundles", e))?;
    if definition.spec.deletion_policy == DeletionPolicy::Delete
        && let Some(crd_status) = crd_status
    {
        delete_crd_if_unshared(&context.client, definition, &crd_status.name).await?;
    }
    context.compositions.stop(definition);
    Ok(Action::await_change())
}

/// Asks every composition to go; returns how many are still there.
async fn delete_compositions(
    client: &Client,
    names: &Names,
    version: &str,
) -> Result<usize, Error> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&names.group, version, &names.kind),
        &names.plural,
    );
    let all = Api::<DynamicObject>::all_with(client.clone(), &resource);
    let listed = all
        .list_metadata(&ListParams::default())
        .await
        .map_err(|e| Error::Kube("list compositions", e))?;
    for item in &listed.items {
        if item.metadata.deletion_timestamp.is_none() {
            let namespace = item.metadata.namespace.clone().unwrap_or_default();
            let api = Api::<DynamicObject>::namespaced_with(client.clone(), &namespace, &resource);
            match api
                .delete(&item.name_any(), &DeleteParams::background())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(Error::Kube("delete composition", error)),
            }
        }
    }
    Ok(listed.items.len())
}

async fn delete_crd_if_unshared(
    client: &Client,
    definition: &CompositionDefinition,
    crd_name: &str,
) -> Result<(), Error> {
    let others = Api::<CompositionDefinition>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| Error::Kube("list definitions", e))?;
    let shared = others.items.iter().any(|other| {
        other.uid() != definition.uid()
            && other.metadata.deletion_timestamp.is_none()
            && other
                .status
                .as_ref()
                .and_then(|s| s.crd.as_ref())
                .is_some_and(|crd| crd.name == crd_name)
    });
    if shared {
        return Ok(());
    }
    match Api::<CustomResourceDefinition>::all(client.clone())
        .delete(crd_name, &DeleteParams::background())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(Error::Kube("delete CRD", error)),
    }
}
