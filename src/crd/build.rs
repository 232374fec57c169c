//! Assembly of a chart's CustomResourceDefinition: one version per chart version, `spec` from
//! the chart's schema, the fixed composition `status`, subresource, columns and categories.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceConversion, CustomResourceDefinition,
    CustomResourceDefinitionNames, CustomResourceDefinitionSpec, CustomResourceDefinitionVersion,
    CustomResourceSubresourceStatus, CustomResourceSubresources, CustomResourceValidation, JSON,
    JSONSchemaProps, JSONSchemaPropsOrArray,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::Error;
use super::naming::{self, Names};
use super::size::{self, DEFAULT_MAX_VERSION_BYTES};
use crate::api::CompositionStatus;
use crate::api::NameOverrides;
use crate::chart::Package;
use crate::schema::infer::Report;
use crate::schema::{self, ConvertOptions, Warning};

/// Choices of a CRD build.
#[derive(Clone, Debug)]
pub struct BuildOptions {
    /// Name overrides.
    pub names: NameOverrides,
    /// CRD version name; default `v` + the chart version.
    pub version_name: Option<String>,
    /// Schema conversion choices.
    pub convert: ConvertOptions,
    /// Budget of one version's schema in bytes (see [`DEFAULT_MAX_VERSION_BYTES`]).
    pub max_version_bytes: usize,
    /// Add the optional `spec.clusterRef` (one cluster among those placed on), for
    /// definitions that place compositions on registered clusters.
    pub cluster_ref: bool,
    /// Add the optional `spec.dependsOn` (the compositions to wait for), for definitions.
    pub depends_on: bool,
    /// Add the optional `spec.valuesFrom` (ConfigMaps and Secrets values come from), for
    /// definitions.
    pub values_from: bool,
}

impl Default for BuildOptions {
    fn default() -> Self {
        Self {
            names: NameOverrides::default(),
            version_name: None,
            convert: ConvertOptions::default(),
            max_version_bytes: DEFAULT_MAX_VERSION_BYTES,
            cluster_ref: false,
            depends_on: false,
            values_from: false,
        }
    }
}

use crate::api::{CLUSTER_REF, DEFAULT_VALUES_KEY, DEPENDS_ON, VALUES_FROM};

/// Categories of every generated CRD (`kubectl get compositions`).
pub const CATEGORIES: [&str; 2] = ["compositions", "compositor"];

/// What a build says of the schema besides the CRD.
#[derive(Clone, Debug, Default)]
pub struct SchemaNotes {
    /// Every lossy step of the conversion.
    pub warnings: Vec<Warning>,
    /// How the schema was inferred from values.yaml, when it was.
    pub inferred: Option<Report>,
}

/// The CRD of `package` with a single version for its chart version, and what the schema
/// conversion lost or inferred.
pub fn build(
    package: &Package,
    options: &BuildOptions,
) -> Result<(CustomResourceDefinition, SchemaNotes), Error> {
    let names = Names::new(&package.metadata.name, &options.names)?;
    let (version, notes) = build_version(package, options)?;
    Ok((assemble(&names, vec![version]), notes))
}

/// One served and stored CRD version for `package`, to be merged into an existing CRD with
/// [`merge_version`] when the chart version changes.
pub fn build_version(
    package: &Package,
    options: &BuildOptions,
) -> Result<(CustomResourceDefinitionVersion, SchemaNotes), Error> {
    let name = match &options.version_name {
        Some(n) => {
            naming::check_version_name(n)?;
            n.clone()
        }
        None => naming::version_name(&package.metadata.version)?,
    };
    // An inferred schema takes the declared one's place, so everything after (conversion,
    // validation, compatibility) treats both alike.
    let inferred = schema::infer::when_asked(package, &options.convert);
    let package = inferred.as_ref().map_or(package, |i| &i.package);
    let (mut spec, mut warnings) = match &package.schema {
        Some(values_schema) => schema::convert(values_schema, package, &options.convert),
        None => (
            JSONSchemaProps {
                type_: Some("object".to_owned()),
                x_kubernetes_preserve_unknown_fields: Some(true),
                ..Default::default()
            },
            Vec::new(),
        ),
    };
    if options.cluster_ref {
        reserve(&mut spec, CLUSTER_REF, cluster_ref())?;
    }
    if options.depends_on {
        reserve(&mut spec, DEPENDS_ON, depends_on())?;
    }
    if options.values_from {
        reserve(&mut spec, VALUES_FROM, values_from())?;
    }
    if spec.description.is_none() {
        let about = match &package.metadata.description {
            Some(d) => format!(
                "Values of the {} chart {}: {d}",
                package.metadata.name, package.metadata.version
            ),
            None => format!(
                "Values of the {} chart {}.",
                package.metadata.name, package.metadata.version
            ),
        };
        spec.description = Some(match &inferred {
            Some(_) => format!("{about}\n\n{}", schema::infer::ABOUT),
            None => about,
        });
    }
    let status = CompositionStatus::openapi_schema().map_err(Error::Serialize)?;
    let budget = options
        .max_version_bytes
        .saturating_sub(size::schema_bytes(&status)?);
    if let Some(w) = size::fit(&mut spec, budget, &name)? {
        warnings.push(w);
    }
    let notes = SchemaNotes {
        warnings,
        inferred: inferred.map(|i| i.report),
    };
    Ok((version(&name, spec, status), notes))
}

/// A served, stored version with `spec` as its values schema and `status` as the composition
/// status schema ([`CompositionStatus::openapi_schema`]).
pub fn version(
    name: &str,
    spec: JSONSchemaProps,
    status: JSONSchemaProps,
) -> CustomResourceDefinitionVersion {
    let root = JSONSchemaProps {
        type_: Some("object".to_owned()),
        description: Some(
            "A composition: one Helm release of the chart, with `spec` as its values.".to_owned(),
        ),
        properties: Some(BTreeMap::from([
            ("spec".to_owned(), spec),
            ("status".to_owned(), status),
        ])),
        ..Default::default()
    };
    CustomResourceDefinitionVersion {
        name: name.to_owned(),
        served: true,
        storage: true,
        schema: Some(CustomResourceValidation {
            open_api_v3_schema: Some(root),
        }),
        subresources: Some(CustomResourceSubresources {
            status: Some(CustomResourceSubresourceStatus(serde_json::Value::Object(
                Default::default(),
            ))),
            scale: None,
        }),
        additional_printer_columns: Some(columns()),
        ..Default::default()
    }
}

/// Adds `version` to `crd` (replacing a version of the same name) and makes it the storage
/// version; older versions stay served.
pub fn merge_version(crd: &mut CustomResourceDefinition, version: CustomResourceDefinitionVersion) {
    let versions = &mut crd.spec.versions;
    for v in versions.iter_mut() {
        v.storage = false;
    }
    match versions.iter_mut().find(|v| v.name == version.name) {
        Some(existing) => *existing = version,
        None => versions.push(version),
    }
}

/// Puts compositor's own `key` with `schema` into the spec; a chart that declares its own
/// top-level `key` cannot get it, because the key would be both a Helm value and compositor's.
fn reserve(spec: &mut JSONSchemaProps, key: &str, schema: JSONSchemaProps) -> Result<(), Error> {
    let properties = spec.properties.get_or_insert_with(BTreeMap::new);
    if properties.contains_key(key) {
        return Err(Error::ReservedKey {
            key: key.to_owned(),
        });
    }
    properties.insert(key.to_owned(), schema);
    Ok(())
}

/// A schema of `type_` with `description`.
fn typed(type_: &str, description: &str) -> JSONSchemaProps {
    JSONSchemaProps {
        type_: Some(type_.to_owned()),
        description: Some(description.to_owned()),
        ..Default::default()
    }
}

/// `spec.clusterRef: {name}`: one cluster among those the definition places on.
fn cluster_ref() -> JSONSchemaProps {
    let name = typed(
        "string",
        "The cluster: `local`, or the name of its registration Secret.",
    );
    JSONSchemaProps {
        properties: Some(BTreeMap::from([("name".to_owned(), name)])),
        required: Some(vec!["name".to_owned()]),
        ..typed(
            "object",
            "Install on this one cluster only, among those the definition places on. Not passed \
             to the chart.",
        )
    }
}

/// `spec.dependsOn: [{kind, name, namespace}]`: the compositions to wait for.
fn depends_on() -> JSONSchemaProps {
    let entry = JSONSchemaProps {
        properties: Some(BTreeMap::from([
            (
                "kind".to_owned(),
                typed("string", "The composition's kind, of this API group."),
            ),
            (
                "name".to_owned(),
                typed("string", "The composition's name."),
            ),
            (
                "namespace".to_owned(),
                typed(
                    "string",
                    "Only this composition's own namespace may be named.",
                ),
            ),
        ])),
        required: Some(vec!["kind".to_owned(), "name".to_owned()]),
        ..typed("object", "A composition to wait for.")
    };
    JSONSchemaProps {
        items: Some(JSONSchemaPropsOrArray::Schema(Box::new(entry))),
        ..typed(
            "array",
            "Compositions to wait for, of a kind of this API group: the one of that name in \
             this namespace or, when there is none, the one whose release runs in it (its \
             Tenant). The release is installed or upgraded once each is Ready. Not passed to \
             the chart.",
        )
    }
}

/// `spec.valuesFrom: [{kind, name, key, targetPath, optional, namespace}]`: where more values
/// come from.
fn values_from() -> JSONSchemaProps {
    let kind = JSONSchemaProps {
        enum_: Some(vec![JSON("ConfigMap".into()), JSON("Secret".into())]),
        ..typed("string", "ConfigMap or Secret.")
    };
    let key = typed(
        "string",
        &format!("The key whose content is taken (default {DEFAULT_VALUES_KEY})."),
    );
    let entry = JSONSchemaProps {
        properties: Some(BTreeMap::from([
            ("kind".to_owned(), kind),
            ("name".to_owned(), typed("string", "The object's name.")),
            ("key".to_owned(), key),
            (
                "targetPath".to_owned(),
                typed(
                    "string",
                    "Put the key's content at this path (a.b.c) as one string value; without \
                     it the content is a YAML map of values.",
                ),
            ),
            (
                "optional".to_owned(),
                typed(
                    "boolean",
                    "Skip the object or key when it is absent, instead of waiting for it.",
                ),
            ),
            (
                "namespace".to_owned(),
                typed(
                    "string",
                    "Only this composition's own namespace may be named.",
                ),
            ),
        ])),
        required: Some(vec!["kind".to_owned(), "name".to_owned()]),
        ..typed("object", "An object values come from.")
    };
    JSONSchemaProps {
        items: Some(JSONSchemaPropsOrArray::Schema(Box::new(entry))),
        ..typed(
            "array",
            "ConfigMaps and Secrets in this namespace whose values are merged in order, beneath \
             the spec's own, and followed when they change; read as the release's identity. A \
             Secret's content is never shown. Not passed to the chart.",
        )
    }
}

/// Fails when the whole CRD (every version) is larger than `limit` bytes as JSON, so that an
/// update adding a version is refused before etcd refuses it.
pub fn check_size(crd: &CustomResourceDefinition, limit: usize) -> Result<(), Error> {
    let size = serde_json::to_vec(crd).map_err(Error::Serialize)?.len();
    if size > limit {
        return Err(Error::CrdTooLarge {
            name: crd.metadata.name.clone().unwrap_or_default(),
            size,
            limit,
        });
    }
    Ok(())
}

/// The CRD as a YAML document, as `compositor crd` prints it.
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, Error> {
    serde_saphyr::to_string(crd).map_err(Error::Yaml)
}

/// A CRD with `names` and `versions` and everything else compositor sets on generated CRDs.
pub fn assemble(
    names: &Names,
    versions: Vec<CustomResourceDefinitionVersion>,
) -> CustomResourceDefinition {
    CustomResourceDefinition {
        metadata: ObjectMeta {
            name: Some(names.crd_name()),
            ..Default::default()
        },
        spec: CustomResourceDefinitionSpec {
            group: names.group.clone(),
            names: CustomResourceDefinitionNames {
                kind: names.kind.clone(),
                list_kind: Some(names.list_kind.clone()),
                plural: names.plural.clone(),
                singular: Some(names.singular.clone()),
                short_names: (!names.short_names.is_empty()).then(|| names.short_names.clone()),
                categories: Some(CATEGORIES.iter().map(|c| (*c).to_owned()).collect()),
            },
            scope: "Namespaced".to_owned(),
            versions,
            conversion: Some(CustomResourceConversion {
                strategy: "None".to_owned(),
                webhook: None,
            }),
            preserve_unknown_fields: None,
        },
        status: None,
    }
}

fn columns() -> Vec<CustomResourceColumnDefinition> {
    let column =
        |name: &str, type_: &str, path: &str, description: &str| CustomResourceColumnDefinition {
            name: name.to_owned(),
            type_: type_.to_owned(),
            json_path: path.to_owned(),
            description: Some(description.to_owned()),
            ..Default::default()
        };
    vec![
        column(
            "Ready",
            "string",
            r#".status.conditions[?(@.type=="Ready")].status"#,
            "Whether every release is installed and healthy.",
        ),
        column(
            "Reason",
            "string",
            r#".status.conditions[?(@.type=="Ready")].reason"#,
            "Why it is ready or not: Ready, Progressing, Unhealthy, or what failed.",
        ),
        column(
            "Clusters",
            "string",
            ".status.readyClusters",
            "Clusters whose release is installed and healthy, of all it is placed on.",
        ),
        column(
            "Chart",
            "string",
            ".status.chart.version",
            "Installed chart version.",
        ),
        column(
            "Age",
            "date",
            ".metadata.creationTimestamp",
            "Time since creation.",
        ),
    ]
}

#[cfg(test)]
#[path = "build_tests.rs"]
mod tests;
