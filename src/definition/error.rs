//! Why a reconcile of a definition stopped, and which condition says so.

use crate::api::{CHART_RESOLVED, CONTROLLER_READY, CRD_READY, READY};
use crate::runtime::ReconcileError;
use crate::{chart, crd};

/// Why a reconcile of a definition stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The chart could not be resolved, fetched or read.
    #[error(transparent)]
    Chart(#[from] chart::Error),
    /// The chart's CRD could not be built.
    #[error(transparent)]
    Crd(#[from] crd::Error),
    /// The CRD exists and serves this version for another definition (or was not made by compositor).
    #[error("CRD {crd} is managed by {owner}")]
    CrdOwnedByAnother {
        /// CRD name.
        crd: String,
        /// The other owner.
        owner: String,
    },
    /// The chart writes a CRD that is compositor's own or one it generated.
    #[error(
        "the chart writes CRD {crd}, which is compositor's own or generated for a definition: a chart may write only CRDs of its own"
    )]
    ChartCrdNotAllowed {
        /// The CRD's name.
        crd: String,
    },
    /// The chart's default render has ClusterRoles whose aggregation no approval can admit: a
    /// selector that could gather Kubernetes' or compositor's own roles, or `matchExpressions`.
    #[error(
        "with its default values the chart writes ClusterRoles whose aggregationRule could gather \
         Kubernetes' or compositor's own roles, which no approval admits (only matchLabels \
         selectors of the chart's own labels can be approved); use a chart version whose defaults \
         leave them out, one line each:\n{}",
        roles.join("\n")
    )]
    AggregatedRoles {
        /// Each ClusterRole, its name as a pattern, and why.
        roles: Vec<String>,
    },
    /// A health check of the definition does not compile.
    #[error(transparent)]
    HealthCheck(#[from] crate::api::CheckError),
    /// `spec.rollout` cannot be followed; the message names the field.
    #[error("{0}")]
    Rollout(String),
    /// A republished chart version changes its schema incompatibly.
    #[error("version {version} cannot be updated: {detail}")]
    SchemaConflict {
        /// CRD version name.
        version: String,
        /// Why not.
        detail: String,
    },
    /// Something is not there yet; not a failure.
    #[error("waiting for the {0}")]
    Waiting(&'static str),
    /// The definition changed while this reconcile ran: nothing decided from the copy it read
    /// is recorded, and the newer one is reconciled next.
    #[error("the definition changed since it was read")]
    Superseded,
    /// Compositions are still being uninstalled.
    #[error("waiting for {0} compositions to be deleted")]
    CompositionsRemaining(usize),
    /// A bundle object could not be built (a bug).
    #[error("cannot build the controller bundle")]
    Bundle(#[source] serde_json::Error),
    /// What the bundle would grant needs an administrator's approval first.
    #[error(
        "an administrator must approve what the controller of version {version} would be granted \
         (`approve` on {resource}.{group} named by each line, for the operator's ServiceAccount; \
         README: Approving a definition), one line each:\n{}",
        grants.join("\n")
    )]
    ApprovalRequired {
        /// The CRD version whose bundle waits.
        version: String,
        /// The grant lines not approved yet.
        grants: Vec<String>,
        /// [`crate::rbac::GRANTS_RESOURCE`], for the message.
        resource: &'static str,
        /// [`crate::api::GROUP`], for the message.
        group: &'static str,
    },
    /// The Kubernetes API failed while the controller bundles were written: the controllers
    /// are not what the definition asks for.
    #[error("Kubernetes API request failed ({0})")]
    Bundles(&'static str, #[source] kube::Error),
    /// The Kubernetes API failed.
    #[error("Kubernetes API request failed ({0})")]
    Kube(&'static str, #[source] kube::Error),
    /// The finalizer helper failed.
    #[error("finalizer failed")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    /// The registration Secrets are not listed yet, so which ones the placement selects is not
    /// known.
    #[error(
        "the cluster Secrets in namespace {namespace} are not listed yet (the operator needs \
         list and watch on Secrets there)"
    )]
    ClusterSecretsNotListed {
        /// The clusters namespace.
        namespace: String,
    },
}

impl Error {
    /// The condition reason, and which condition it belongs to.
    pub(super) fn reason(&self) -> (&'static str, &'static str) {
        match self {
            Error::Chart(error) => (CHART_RESOLVED, error.reason()),
            Error::Crd(error) => (CRD_READY, error.reason()),
            Error::CrdOwnedByAnother { .. } => (CRD_READY, "CRDOwnedByAnotherDefinition"),
            Error::ChartCrdNotAllowed { .. } => (CRD_READY, "ChartCRDNotAllowed"),
            Error::AggregatedRoles { .. } => (CONTROLLER_READY, "AggregatedRoleNotAllowed"),
            Error::SchemaConflict { .. } => (CRD_READY, "SchemaConflict"),
            Error::HealthCheck(_) => (READY, "InvalidHealthCheck"),
            Error::Rollout(_) => (READY, "InvalidRollout"),
            Error::Waiting(_) => (CRD_READY, "Progressing"),
            Error::CompositionsRemaining(_) => (READY, "DeletingCompositions"),
            Error::Bundle(_) => (CONTROLLER_READY, "InvalidBundle"),
            Error::ApprovalRequired { .. } => (CONTROLLER_READY, "ApprovalRequired"),
            Error::ClusterSecretsNotListed { .. } => (CONTROLLER_READY, "ClusterSecretsNotListed"),
            Error::Bundles(..) => (CONTROLLER_READY, "KubernetesAPIError"),
            Error::Kube(..) | Error::Finalizer(_) | Error::Superseded => {
                (READY, "KubernetesAPIError")
            }
        }
    }
}

impl ReconcileError for Error {
    /// Errors that a retry cannot fix until the definition (or its chart) changes.
    fn is_terminal(&self) -> bool {
        match self {
            Error::Chart(error) => !error.is_transient(),
            Error::Crd(_)
            | Error::CrdOwnedByAnother { .. }
            | Error::ChartCrdNotAllowed { .. }
            | Error::AggregatedRoles { .. }
            | Error::SchemaConflict { .. }
            | Error::HealthCheck(_)
            | Error::Rollout(_)
            | Error::Bundle(_) => true,
            _ => false,
        }
    }

    fn from_finalizer(error: kube::runtime::finalizer::Error<Error>) -> Self {
        Error::Finalizer(Box::new(error))
    }
}
