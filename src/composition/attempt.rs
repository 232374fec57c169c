//! One Helm write's inputs, and what failed for good with them: inputs the cluster refused (or
//! the chart does not render) are recorded, so the same inputs run no Helm again until they, or
//! the composition's `compositor.dev/retry` annotation, change; a first install that failed so
//! is removed, so that nothing of it stays half-installed.

use kube::core::DynamicObject;

use super::{Context, Error, HelmStep};
use crate::api::{ClusterStatus, FinalFailure, Phase, RETRY_ANNOTATION};
use crate::helm;

/// The inputs of one Helm write.
pub(super) struct Attempt {
    /// Their fingerprint, recorded once installed.
    pub fingerprint: String,
    /// Their fingerprint with the retry annotation, recorded when they failed for good.
    inputs: String,
}

impl Attempt {
    /// The attempt of inputs with `fingerprint` for composition `object`.
    pub fn new(fingerprint: String, object: &DynamicObject) -> Attempt {
        let annotations = object.metadata.annotations.as_ref();
        let inputs = match annotations.and_then(|a| a.get(RETRY_ANNOTATION)) {
            Some(retry) => format!("{fingerprint} retry={retry}"),
            None => fingerprint.clone(),
        };
        Attempt {
            fingerprint,
            inputs,
        }
    }

    /// The failure again, when the target's `recorded` entry says these inputs failed for good.
    pub fn failed_before(&self, recorded: &ClusterStatus) -> Option<Error> {
        let failure = recorded.final_failure.as_ref()?;
        (recorded.phase == Phase::Failed && failure.inputs == self.inputs).then(|| {
            Error::FailedBefore {
                reason: failure.reason.clone(),
                message: recorded.message.clone(),
            }
        })
    }

    /// What to record of these inputs failing for good with `error`.
    pub fn final_failure(self, error: &Error) -> FinalFailure {
        FinalFailure {
            inputs: self.inputs,
            reason: error.reason().to_string(),
        }
    }
}

/// Uninstalls what a failed first install of `release` left: whether nothing of it is left, and what to
/// add to the failure's message.
pub(super) async fn remove_failed_install(
    context: &Context,
    kube_context: &helm::KubeContext,
    release: &str,
    withhold: bool,
) -> (bool, Option<String>) {
    match context.helm.uninstall(kube_context, release).await {
        Ok(true) => (
            true,
            Some("; what the install had created is removed".into()),
        ),
        Ok(false) => (true, None),
        Err(removal) => {
            let removal = Error::from_helm(HelmStep::Uninstall, removal, withhold);
            let removal = crate::runtime::error_message(&removal);
            let note = format!("; removing what it had created failed: {removal}");
            (false, Some(note))
        }
    }
}
