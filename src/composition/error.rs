//! Why a composition is not (yet) installed: each error names its condition reason, whether only
//! a change of the composition can fix it, and when to look again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use super::kubeconfig;
use crate::runtime::ReconcileError;
use crate::{chart, helm, schema};

/// Why a composition is not (yet) installed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The definition cannot be read or has not resolved this version yet.
    #[error("definition {0} is not ready for this version")]
    DefinitionNotReady(String),
    /// The chart could not be fetched.
    #[error(transparent)]
    Chart(#[from] chart::Error),
    /// The values break the chart's schema.
    #[error("values do not match the chart's schema: {0}")]
    InvalidValues(String),
    /// The values hold template actions, which the definition does not allow.
    #[error(
        "the values hold template actions ({{{{ … }}}}) at {0}, which a chart's tpl would run as the release's identity; the definition does not allow them (spec.permissions.templatesInValues)"
    )]
    TemplatesNotAllowed(String),
    /// The release name is unusable.
    #[error("{0}")]
    ReleaseName(String),
    /// The chart does not render with these values.
    #[error("the chart does not render")]
    Render(#[source] helm::Error),
    /// The rendered manifest is not a list of objects.
    #[error(transparent)]
    Manifest(#[from] helm::ManifestError),
    /// The render with these values is larger than a release may be, or took more memory or
    /// CPU time than a Helm call may.
    #[error("{0}")]
    TooLarge(String),
    /// The chart would write objects this controller may not write.
    #[error("{0}")]
    PermissionsMissing(String),
    /// The operator has not granted this controller the release namespace yet (it does so
    /// once it sees the composition).
    #[error("waiting for access to namespace {0}, which the operator grants for each composition")]
    AccessPending(String),
    /// `placement.namespace: CompositionName` names a namespace no composition may have.
    #[error(
        "namespace {0} is reserved (Kubernetes' own, the operator's or the definition's) and is never a composition's own namespace: rename the composition"
    )]
    NamespaceReserved(String),
    /// The composition's own namespace exists but was not made for it.
    #[error(
        "namespace {0} exists and was not created for this composition, so compositor installs nothing there: rename the composition"
    )]
    NamespaceNotOwned(String),
    /// The chart, with these values, writes into namespaces that are not the composition's.
    #[error(
        "the chart with these values writes into namespace {0}, which is not this composition's: it may write only into {1} (its release namespace, the chart's own with its default values, and the definition's spec.permissions.namespaces)"
    )]
    NamespaceNotAllowed(String, String),
    /// The chart, with these values, binds roles to subjects that are not the composition's,
    /// other than as an administrator approved.
    #[error(
        "the chart with these values binds roles to subjects that are not ServiceAccounts of this composition's namespaces, other than as an administrator approved (README: Approving a definition): {0}"
    )]
    BindingNotAllowed(String),
    /// The chart, with these values, would run a workload as one of compositor's own
    /// identities (a release identity or a controller).
    #[error(
        "the chart with these values runs workloads as compositor's own identities, which only compositor may act as, and no line can admit that: {0}"
    )]
    IdentityNotAllowed(String),
    /// The release's name would give one of the chart's cluster-scoped objects a reserved name.
    #[error(
        "the release name is reserved: {0}, a name only Kubernetes or compositor may give, which no line can admit; name the release otherwise (compositor.dev/release-name)"
    )]
    ReleaseNameReserved(String),
    /// The chart, with these values, would grant more through its ClusterRoles than with its
    /// default values.
    #[error(
        "the chart with these values grants more than its ClusterRoles grant with its default values: {0}"
    )]
    RoleNotAllowed(String),
    /// The release belongs to another composition, or was made without compositor.
    #[error(
        "{0} belongs to another composition or was not made by compositor; it is left as it is: choose another release name (annotation compositor.dev/release-name)"
    )]
    ReleaseOwnedByAnother(String),
    /// The API server refused what Helm wrote (an admission webhook or policy, or an invalid
    /// object): the same inputs are refused again.
    #[error("{0} was refused by the cluster: {1}")]
    Rejected(HelmStep, String),
    /// These inputs failed for good before (see [`Error::is_final`]): not tried again. The
    /// condition keeps the reason they failed with.
    #[error(
        "{message} (not tried again with these values: change them, or annotate the composition compositor.dev/retry with a new value)"
    )]
    FailedBefore {
        /// The reason of the failure recorded.
        reason: String,
        /// Its message.
        message: String,
    },
    /// A Helm operation on the release failed.
    #[error("{0} failed")]
    Helm(HelmStep, #[source] helm::Error),
    /// Helm cannot be handed the controller's credentials.
    #[error(transparent)]
    Kubeconfig(#[from] kubeconfig::Error),
    /// The values validator failed.
    #[error(transparent)]
    Schema(#[from] schema::Error),
    /// The Kubernetes API failed.
    #[error("Kubernetes API request failed ({0})")]
    Kube(&'static str, #[source] kube::Error),
    /// A target cluster is not registered, its Secret is unusable, or it does not answer.
    #[error(transparent)]
    Cluster(#[from] crate::clusters::Error),
    /// `spec.clusterRef` names a cluster the definition's placement does not select.
    #[error(
        "spec.clusterRef.name {0:?} is not one of the clusters this definition places on ({1})"
    )]
    ClusterNotPlaced(String, String),
    /// An annotation of the composition has a value it cannot have.
    #[error("{0}")]
    InvalidAnnotation(String),
    /// Drift could not be looked at: Helm's record of the release is unreadable, or no client
    /// acts as the release identity.
    #[error("drift of the release cannot be settled: {0}")]
    Drift(String),
    /// An object was corrected again and again: another writer changes it back each time.
    #[error(
        "{0}, corrected too often: another writer changes it back each time, so it is corrected no more (a role or binding is left as rendered, anything else as it is); stop that writer, or list the fields in the definition's spec.drift.ignore"
    )]
    DriftConflict(String),
    /// `spec.dependsOn` names what a composition may not wait for.
    #[error("{0}")]
    DependencyNotAllowed(String),
    /// A composition waited for is absent, or not Ready for its current generation.
    #[error("waiting for {0}")]
    DependencyNotReady(String),
    /// The compositions wait for each other in a circle: none of them installs.
    #[error(
        "the compositions wait for each other in a circle, so none is installed: {0}; remove one of these dependsOn entries"
    )]
    DependencyCycle(String),
    /// A deleted composition waits for the compositions that depend on it to go first.
    #[error("waiting for {names} to be deleted first, which depend on it (at most {wait:?} more)")]
    DependentsExist {
        /// The dependents, named.
        names: String,
        /// How much longer the deletion waits for them.
        wait: Duration,
    },
    /// `spec.valuesFrom` names what a composition may not take values from.
    #[error("{0}")]
    ValuesSourceNotAllowed(String),
    /// An object `spec.valuesFrom` names (not optional) is absent, or lacks the key.
    #[error("{0}")]
    ValuesSourceMissing(String),
    /// An object `spec.valuesFrom` names is not readable as the release identity.
    #[error("{0}")]
    ValuesSourceNotReadable(String),
    /// A key `spec.valuesFrom` names does not hold values (its content is never shown).
    #[error("{0}")]
    ValuesSourceInvalid(String),
    /// The finalizer helper failed.
    #[error("finalizer failed")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

impl Error {
    /// A failed Helm step; a refusal by the authorizer is a permission problem, which retrying
    /// does not fix, and neither does a chart that does not render with these values. With
    /// `withhold`, Helm's own words are left out ([`helm::Error::withheld`]).
    pub(super) fn from_helm(step: HelmStep, error: helm::Error, withhold: bool) -> Error {
        let render_failure = error.is_render_failure();
        let rejected = error.is_rejected();
        let forbidden = error.is_forbidden();
        if withhold && !render_failure {
            // The administrator's to read, not the tenant's. Past rendering, Helm's words are
            // the cluster's answers to what it asked and wrote (a refused request names verb,
            // resource and name), not what a template read; a render's own failure may quote
            // what it looked up, so it stays withheld everywhere.
            tracing::warn!(%step, helm = %error, "Helm's words, withheld from the composition");
        }
        let error = match withhold {
            true => error.withheld(),
            false => error,
        };
        if let helm::Error::OutOfMemory { .. } | helm::Error::OutOfCpu { .. } = error {
            Error::TooLarge(error.to_string())
        } else if render_failure {
            Error::Render(error)
        } else if rejected {
            Error::Rejected(step, crate::runtime::error_message(&error))
        } else if forbidden {
            Error::PermissionsMissing(format!(
                "{step} was refused: {}",
                crate::runtime::error_message(&error)
            ))
        } else {
            Error::Helm(step, error)
        }
    }

    /// The condition reason.
    pub(super) fn reason(&self) -> &'static str {
        match self {
            Error::DefinitionNotReady(_) => "DefinitionNotReady",
            Error::Chart(error) => error.reason(),
            Error::InvalidValues(_) => "InvalidValues",
            Error::TemplatesNotAllowed(_) => "TemplatesNotAllowed",
            Error::ReleaseName(_) => "InvalidReleaseName",
            Error::Render(_) | Error::Manifest(_) => "RenderFailed",
            Error::TooLarge(_) => "RenderTooLarge",
            Error::PermissionsMissing(_) => "PermissionsMissing",
            Error::ReleaseOwnedByAnother(_) => "ReleaseOwnedByAnother",
            Error::NamespaceReserved(_) => "NamespaceReserved",
            Error::NamespaceNotAllowed(..) => "NamespaceNotAllowed",
            Error::BindingNotAllowed(_) => "BindingNotAllowed",
            Error::IdentityNotAllowed(_) => "IdentityNotAllowed",
            Error::ReleaseNameReserved(_) => "ReleaseNameReserved",
            Error::RoleNotAllowed(_) => "RoleNotAllowed",
            Error::NamespaceNotOwned(_) => "NamespaceNotOwned",
            Error::AccessPending(_) => "AccessPending",
            Error::Rejected(step, _) => step.rejected_reason(),
            Error::FailedBefore { reason, .. } => final_reason(reason),
            Error::Helm(step, _) => step.reason(),
            Error::Kubeconfig(_) => "CredentialsUnusable",
            Error::Schema(_) => "InvalidSchema",
            Error::Kube(..) | Error::Finalizer(_) => "KubernetesAPIError",
            Error::Cluster(error) => error.reason(),
            Error::ClusterNotPlaced(..) => "ClusterNotPlaced",
            Error::InvalidAnnotation(_) => "InvalidAnnotation",
            Error::Drift(_) => "DriftUnsettled",
            Error::DriftConflict(_) => "DriftConflict",
            Error::DependencyNotAllowed(_) => "DependencyNotAllowed",
            Error::DependencyNotReady(_) => "DependencyNotReady",
            Error::DependencyCycle(_) => "DependencyCycle",
            Error::DependentsExist { .. } => "DependentsExist",
            Error::ValuesSourceNotAllowed(_) => "ValuesSourceNotAllowed",
            Error::ValuesSourceMissing(_) => "ValuesSourceMissing",
            Error::ValuesSourceNotReadable(_) => "ValuesSourceNotReadable",
            Error::ValuesSourceInvalid(_) => "ValuesSourceInvalid",
        }
    }

    /// Failures the same inputs meet again, whatever is granted: the chart does not render
    /// them, or the cluster refuses what they render. A release that failed so is not tried
    /// again with those inputs.
    pub(super) fn is_final(&self) -> bool {
        matches!(
            self,
            Error::Render(_) | Error::Manifest(_) | Error::TooLarge(_) | Error::Rejected(..)
        )
    }

    /// When to look again. A change of the composition brings a terminal error back at once;
    /// missing permissions may also be on their way, since the operator binds the controller's
    /// role in a new release namespace only once it sees a composition there.
    pub(super) fn retry_after(&self) -> Duration {
        match self {
            // The operator grants a new namespace within moments of seeing the composition.
            Error::AccessPending(_) => Duration::from_millis(500),
            // The operator grants what a new composition's release writes once it sees the
            // composition, which a controller installing at once may beat.
            Error::PermissionsMissing(_) => Duration::from_secs(2),
            // A dependency's turning Ready wakes its dependents; this is only the fallback.
            Error::DependencyNotReady(_) => Duration::from_secs(300),
            // A dependent's deletion wakes it; otherwise the bounded wait ends on time.
            Error::DependentsExist { wait, .. } => *wait,
            // The watch of the object named wakes it when it comes or changes.
            Error::ValuesSourceMissing(_) => Duration::from_secs(300),
            // The operator binds the release identity in a new namespace once it sees the
            // composition there, which a controller reading at once may beat.
            Error::ValuesSourceNotReadable(_) => Duration::from_secs(2),
            error if error.is_terminal() => Duration::from_secs(300),
            _ => Duration::from_secs(10),
        }
    }
}

impl ReconcileError for Error {
    /// Errors only a change of the composition (or its definition) can fix.
    fn is_terminal(&self) -> bool {
        matches!(
            self,
            Error::InvalidValues(_)
                | Error::TemplatesNotAllowed(_)
                | Error::ReleaseName(_)
                | Error::Render(_)
                | Error::Manifest(_)
                | Error::TooLarge(_)
                | Error::PermissionsMissing(_)
                | Error::ReleaseOwnedByAnother(_)
                | Error::NamespaceReserved(_)
                | Error::NamespaceNotOwned(_)
                | Error::NamespaceNotAllowed(..)
                | Error::BindingNotAllowed(_)
                | Error::IdentityNotAllowed(_)
                | Error::ReleaseNameReserved(_)
                | Error::RoleNotAllowed(_)
                | Error::ClusterNotPlaced(..)
                | Error::Rejected(..)
                | Error::FailedBefore { .. }
                | Error::DriftConflict(_)
                | Error::InvalidAnnotation(_)
                | Error::DependencyNotAllowed(_)
                | Error::DependencyCycle(_)
                | Error::ValuesSourceNotAllowed(_)
                | Error::ValuesSourceInvalid(_)
        )
    }

    fn from_finalizer(error: kube::runtime::finalizer::Error<Error>) -> Self {
        Error::Finalizer(Box::new(error))
    }
}

/// The reasons of failures that are final ([`Error::is_final`]), as recorded.
const FINAL_REASONS: [&str; 4] = [
    "InstallRejected",
    "UpgradeRejected",
    "RenderFailed",
    "RenderTooLarge",
];

/// The reason `recorded` as it was; an unknown one (a status written by hand) is
/// `FailedBefore`.
fn final_reason(recorded: &str) -> &'static str {
    FINAL_REASONS
        .into_iter()
        .find(|reason| *reason == recorded)
        .unwrap_or("FailedBefore")
}

/// The longest wait between two attempts of a composition that keeps failing.
const MAX_RETRY: Duration = Duration::from_secs(300);
/// The longest wait while access is pending: the operator's grant is on its way.
const MAX_ACCESS_RETRY: Duration = Duration::from_secs(30);

impl Error {
    /// When to look again after the `failures`-th failure in a row: [`Error::retry_after`],
    /// doubled with each failure before it, up to [`MAX_RETRY`]. A failing install costs a Helm
    /// run and API requests; a hundred broken compositions must not cost them every 10 s.
    pub(super) fn backoff(&self, failures: u32) -> Duration {
        let cap = match self {
            Error::AccessPending(_) => MAX_ACCESS_RETRY,
            Error::DependentsExist { wait, .. } => return *wait,
            _ => MAX_RETRY.max(self.retry_after()),
        };
        let doublings = failures.saturating_sub(1).min(16);
        self.retry_after().saturating_mul(1 << doublings).min(cap)
    }
}

/// Failures in a row per composition (by UID), for [`Error::backoff`]. Only failing
/// compositions have an entry; a success removes it.
#[derive(Default)]
pub(super) struct Failures(Mutex<HashMap<String, u32>>);

impl Failures {
    /// Counts one more failure of `uid`; the count so far.
    pub(super) fn failed(&self, uid: &str) -> u32 {
        let Ok(mut counts) = self.0.lock() else {
            return 1;
        };
        let count = counts.entry(uid.to_string()).or_default();
        *count = count.saturating_add(1);
        *count
    }

    /// Forgets the failures of `uid`, which reconciled.
    pub(super) fn succeeded(&self, uid: &str) {
        if let Ok(mut counts) = self.0.lock() {
            counts.remove(uid);
        }
    }
}

/// The Helm operation on a release that failed; each has a reason of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HelmStep {
    /// The first install.
    Install,
    /// An upgrade of an existing release.
    Upgrade,
    /// Rolling back or removing a release stuck mid-operation.
    Recover,
    /// Removing the release of a deleted composition.
    Uninstall,
}

impl HelmStep {
    /// The condition and event reason.
    fn reason(self) -> &'static str {
        match self {
            HelmStep::Install => "InstallFailed",
            HelmStep::Upgrade => "UpgradeFailed",
            HelmStep::Recover => "RecoveryFailed",
            HelmStep::Uninstall => "UninstallFailed",
        }
    }

    /// The reason when the cluster refused what this step wrote.
    fn rejected_reason(self) -> &'static str {
        match self {
            HelmStep::Install => "InstallRejected",
            _ => "UpgradeRejected",
        }
    }
}

impl std::fmt::Display for HelmStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HelmStep::Install => "installing the release",
            HelmStep::Upgrade => "upgrading the release",
            HelmStep::Recover => "recovering the release",
            HelmStep::Uninstall => "uninstalling the release",
        })
    }
}

#[cfg(test)]
#[path = "error_tests.rs"]
mod tests;
