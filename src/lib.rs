//! compositor turns any Helm chart into a Kubernetes API.
//!
//! Two roles, side by side, that meet in [`api`] (the resources and the contract between them)
//! and [`rbac`] (RBAC as both read it: the operator grants by it, the controller checks against
//! it), and share their plumbing in [`runtime`]:
//!
//! - the operator ([`definition`]) turns a CompositionDefinition into an API, data flowing one
//!   way: [`chart`] (fetch and unpack) → [`schema`] (values.schema.json → structural schema)
//!   → [`crd`] (names, versions, the CustomResourceDefinition) → [`definition::bundle`] (the version's
//!   controller: Deployment, ServiceAccount, RBAC);
//! - the controller ([`composition`]) turns each composition of one version into Helm
//!   releases: values → placement (the targets, on the [`clusters`] registered) → release
//!   (through [`helm`]) → status.
//!
//! [`commands`] is the edge: each subcommand's flags, and the start-up both roles share.

pub mod api;
pub mod chart;
pub mod clusters;
pub mod commands;
pub mod composition;
pub mod crd;
pub mod definition;
pub mod helm;
pub mod rbac;
pub mod runtime;
pub mod schema;
