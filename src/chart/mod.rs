//! Charts: where they come from (Helm repositories, OCI registries, `.tgz` URLs) and what is
//! inside them.
//!
//! [`fetch`] turns a [`ChartRef`] into a verified, cached [`Package`] in one flow (repository →
//! index → archive → cache) in which a Helm repository and an OCI registry are two sources of
//! versions and archives; [`credentials::resolve`] builds the reference's credentials and CA
//! bundle from Secrets and ConfigMaps; [`Package::load`] reads a local directory or `.tgz`;
//! [`values::coalesced`] gives a chart's values as Helm sees them.

mod archive;
mod cache;
pub mod credentials;
mod error;
mod fetch;
mod http;
mod oci;
mod package;
mod reference;
mod repo;
mod source;
pub mod values;
pub mod version;

pub use archive::Limits;
pub use cache::{Cache, DEFAULT_MAX_BYTES, DEFAULT_POLL_INTERVAL, sha256_digest};
pub use error::Error;
pub use fetch::{Fetched, fetch, fetch_with_limits, is_archive_url, load_or_fetch};
pub use oci::CHART_LAYER_MEDIA_TYPE;
pub use package::{ChartMetadata, ChartType, Dependency, ImportValues, Package, TemplateFile};
pub use reference::{ChartRef, Credentials, DockerAuth, DockerConfig, redact_url};
