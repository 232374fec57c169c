//! Charts: where they come from (Helm repositories, OCI registries, `.tgz` URLs) and what is
//! inside them.

mod package;

pub use package::{ChartMetadata, ChartType, Dependency, Package, TemplateFile};
