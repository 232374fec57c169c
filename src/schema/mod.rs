//! values.schema.json → structural OpenAPI v3 schema.
