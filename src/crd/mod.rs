//! The CustomResourceDefinition of a chart: names, versions, assembly, size guard.

mod build;
mod compat;
mod naming;
mod size;

pub use build::{
    BuildOptions, CATEGORIES, SchemaNotes, assemble, build, build_version, check_size,
    merge_version, to_yaml, version,
};
pub use compat::{Break, breaks, compatible};
pub use naming::{DEFAULT_GROUP, Names, kind_from_chart, plural_of, version_name};
pub use size::{DEFAULT_MAX_VERSION_BYTES, schema_bytes};

/// Errors of CRD assembly.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A derived or overridden name is not valid for Kubernetes.
    #[error("invalid {field} {value:?}: {problem}")]
    InvalidName {
        /// Which name (`kind`, `plural`, `group`, `version`, …).
        field: &'static str,
        /// The offending value.
        value: String,
        /// What rule it breaks.
        problem: String,
    },
    /// A version's schema is larger than its budget even without descriptions.
    #[error(
        "the schema of version {version} is {size} bytes, over the limit of {limit} bytes even without descriptions"
    )]
    TooLarge {
        /// CRD version name.
        version: String,
        /// Size without descriptions.
        size: usize,
        /// The budget.
        limit: usize,
    },
    /// The chart's schema already declares a key compositor reserves in `spec`.
    #[error(
        "the chart's values already have a top-level {key:?}, which compositor reserves in every composition's spec: publish the chart with that value under another name, or a wrapper chart that passes it on"
    )]
    ReservedKey {
        /// The reserved key.
        key: String,
    },
    /// The whole CRD, with every version, is larger than its limit.
    #[error("CRD {name} would be {size} bytes with every version, over the limit of {limit} bytes")]
    CrdTooLarge {
        /// CRD name.
        name: String,
        /// Its size as JSON.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The schema could not be serialised (a bug, not an input problem).
    #[error("cannot serialise the schema")]
    Serialize(#[source] serde_json::Error),
    /// The CRD could not be written as YAML (a bug, not an input problem).
    #[error("cannot write the CRD as YAML")]
    Yaml(#[source] serde_saphyr::SerializeError),
}

impl Error {
    /// A PascalCase reason for Kubernetes conditions and events.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::InvalidName { .. } => "InvalidName",
            Error::TooLarge { .. } => "SchemaTooLarge",
            Error::ReservedKey { .. } => "ReservedKey",
            Error::CrdTooLarge { .. } => "CrdTooLarge",
            Error::Serialize(_) | Error::Yaml(_) => "SerializationFailed",
        }
    }
}
