//! Charts: where they come from (Helm repositories, OCI registries, `.tgz` URLs) and what is
//! inside them.

mod archive;
mod error;
mod package;
pub mod version;

pub use archive::Limits;
pub use error::Error;
pub use package::{ChartMetadata, ChartType, Dependency, Package, TemplateFile};
