//! compositor turns any Helm chart into a Kubernetes API.
//!
//! The flow of a definition, one module per step, data flowing one way:
//! [`chart`] (fetch and unpack) → [`schema`] (values.schema.json → structural schema)
//! → [`crd`] (names, versions, the CustomResourceDefinition).

pub mod api;
pub mod bundle;
pub mod chart;
pub mod clusters;
pub mod commands;
pub mod composition;
pub mod crd;
pub mod definition;
pub mod helm;
pub mod runtime;
pub mod schema;
