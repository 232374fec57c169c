//! The phase a definition is in, read from its status as the reconciler's cache holds it (see
//! [`super::Metrics::count_phases`]; a composition's is `Watched::phase_under`).

use crate::api::{CompositionDefinition, READY, find_condition};

/// `Ready` when the definition's Ready condition is True, else `NotReady` (a definition not yet
/// reconciled included).
pub fn definition_phase(definition: &CompositionDefinition) -> Option<&'static str> {
    let ready = definition
        .status
        .as_ref()
        .and_then(|status| find_condition(&status.conditions, READY))
        .is_some_and(|condition| condition.status == "True");
    Some(if ready { "Ready" } else { "NotReady" })
}
