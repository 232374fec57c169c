//! RBAC as both roles read it: the operator grants by it, the controller checks what a release
//! would write against it, and neither reaches into the other for it.
//!
//! - [`rules`]: rules compared as Kubernetes compares them ([`uncovered`]), one line each
//!   ([`describe`]);
//! - [`kinds`]: the kinds a chart writes, as RBAC names them;
//! - [`naming`]: names as patterns, filled for each release;
//! - [`power`]: what a rule lets its holder do, and whether it needs an administrator's approval;
//! - [`subjects`]: bindings to subjects, and those refused;
//! - [`aggregation`]: aggregated ClusterRoles' selectors;
//! - [`approval`]: the grant lines an administrator approves.

pub mod aggregation;
pub mod approval;
pub mod kinds;
pub mod naming;
pub mod power;
pub mod rules;
pub mod subjects;

pub use approval::{APPROVE_VERB, GRANTS_RESOURCE};
pub use kinds::{TypeRef, chart_kinds, crd_kinds, literal_kinds};
pub use naming::{NAMESPACE, PROBE_NAMESPACE, PROBE_RELEASE, Probe, RELEASE, ReleasePlace};
pub use rules::{ResolvedKind, describe, uncovered};
