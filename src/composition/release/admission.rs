//! The gate between Helm's render and its write: Helm runs with compositor as its
//! post-renderer, so that every object of the rendered manifest is admitted (`confinement`,
//! then the authorizer, `access`) before Helm writes any of it, and the check is of exactly
//! what Helm writes.

use std::pin::pin;

use futures::future::{self, Either};
use kube::ResourceExt;
use kube::api::Api;
use kube::core::DynamicObject;

use super::SharedWriter;
use crate::api::{CompositionChart, NAMESPACE_OWNER_ANNOTATION, RELEASE_OWNER_LABEL, ResourceRef};
use crate::composition::confinement;
use crate::composition::inputs::TargetRelease;
use crate::composition::reach::Reach;
use crate::composition::{Error, access};
use crate::helm::{self, RenderedDocument, parse_documents};

impl TargetRelease<'_> {
    /// `helm upgrade --install` with the gate as its post-renderer, so that what Helm renders is
    /// admitted ([`TargetRelease::admit`]) before Helm writes any of it: one Helm process, and the
    /// check is of exactly what Helm writes. The admission is `None` when Helm stopped before it
    /// had rendered anything.
    pub(super) async fn gated_upgrade(
        &self,
        kube_context: &helm::KubeContext,
        writer: &SharedWriter<'_, '_>,
    ) -> (
        Result<helm::Release, helm::Error>,
        Option<Result<(), Error>>,
    ) {
        let mut ticket = self.context.gate.ticket();
        let owner = self.object.uid().unwrap_or_default();
        let options = helm::UpgradeOptions {
            post_renderer: Some(ticket.renderer().clone()),
            labels: [(RELEASE_OWNER_LABEL.to_string(), owner)].into(),
            ..Default::default()
        };
        let upgrade = self.context.helm.upgrade_install(
            kube_context,
            &self.target.release,
            &self.chart.archive_path,
            self.values,
            options,
        );
        let admission = async {
            let request = ticket.request().await?;
            let admitted = match &request.manifest {
                Ok(manifest) => self.admit(manifest, writer).await,
                Err(too_large) => Err(Error::TooLarge(too_large.to_string())),
            };
            request.answer(admitted.is_ok());
            Some(admitted)
        };
        match future::select(pin!(upgrade), pin!(admission)).await {
            Either::Left((outcome, _)) => (outcome, None),
            Either::Right((admitted, upgrade)) => (upgrade.await, admitted),
        }
    }

    /// What Helm is about to write, before it writes any of it: every object is put to the
    /// authorizer, the objects the release keeps are noted for the status, and the namespace is
    /// made when this release makes it.
    async fn admit(&self, manifest: &str, writer: &SharedWriter<'_, '_>) -> Result<(), Error> {
        let documents = parse_documents(manifest)?;
        self.check_access(&documents).await?;
        let chart = CompositionChart {
            version: self.chart.version.clone(),
            digest: self.chart.digest.clone(),
        };
        writer
            .lock()
            .await
            .rendered(chart, kept_resources(&documents));
        if self.target.creates_namespace() {
            create_namespace(self.reach, &self.target.namespace, self.object).await?;
        }
        Ok(())
    }

    /// Every object Helm would write is checked first, so that nothing is installed halfway:
    /// it must be the composition's to write ([`confinement::check_render`]), and the
    /// authorizer must allow it.
    async fn check_access(&self, documents: &[RenderedDocument]) -> Result<(), Error> {
        let context = self.context;
        let namespace = &self.target.namespace;
        confinement::check_render(context, self.reach, self.target, self.writable, documents)
            .await?;
        let (denied, unserved) =
            access::denials(&self.reach.client, &self.reach.kinds, documents, namespace)
                .await
                .map_err(|e| Error::Kube("access review", e))?;
        if denied.is_empty() && unserved.is_empty() {
            return Ok(());
        }
        let definition = format!(
            "{}/{}",
            context.config.identity.definition.namespace, context.config.identity.definition.name
        );
        let installer = self.reach.installer(&definition);
        let message = access::explain(&denied, &unserved, namespace, &installer);
        Err(Error::PermissionsMissing(message))
    }
}

/// The objects the release keeps. Helm installs `crds/` once and never again, and hooks come
/// and go: neither is what the release keeps.
fn kept_resources(documents: &[RenderedDocument]) -> Vec<ResourceRef> {
    documents
        .iter()
        .filter(|d| !d.is_chart_crd() && !d.is_hook())
        .map(|d| &d.object)
        .map(|o| ResourceRef {
            api_version: o.api_version.clone(),
            kind: o.kind.clone(),
            namespace: o.namespace.clone(),
            name: o.name.clone(),
        })
        .collect()
}

/// Creates the release's namespace on a remote cluster, annotated as made for `object` so that
/// it goes with the release (and only then); one that exists already is left as it is.
async fn create_namespace(reach: &Reach, name: &str, object: &DynamicObject) -> Result<(), Error> {
    use k8s_openapi::api::core::v1::Namespace;
    let namespace: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "annotations": {
            NAMESPACE_OWNER_ANNOTATION: object.uid().unwrap_or_default(),
        }},
    }))
    .map_err(|e| Error::Kube("describe the release namespace", kube::Error::SerdeError(e)))?;
    let namespaces = Api::<Namespace>::all(reach.client.clone());
    match namespaces.create(&Default::default(), &namespace).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(error) => Err(Error::Kube("create the release namespace", error)),
    }
}
