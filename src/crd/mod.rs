//! The CustomResourceDefinition of a chart: names, versions, assembly.
