//! The fixed `status` schema of every composition (DESIGN.md "Compositions").

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSON, JSONSchemaProps, JSONSchemaPropsOrArray,
};

fn string(description: &str) -> JSONSchemaProps {
    JSONSchemaProps {
        type_: Some("string".to_owned()),
        description: Some(description.to_owned()),
        ..Default::default()
    }
}

fn int64(description: &str) -> JSONSchemaProps {
    JSONSchemaProps {
        type_: Some("integer".to_owned()),
        format: Some("int64".to_owned()),
        description: Some(description.to_owned()),
        ..Default::default()
    }
}

fn time(description: &str) -> JSONSchemaProps {
    JSONSchemaProps {
        format: Some("date-time".to_owned()),
        ..string(description)
    }
}

fn phase(description: &str) -> JSONSchemaProps {
    JSONSchemaProps {
        enum_: Some(
            ["Ready", "Progressing", "Failed", "Paused"]
                .into_iter()
                .map(|p| JSON(p.into()))
                .collect(),
        ),
        ..string(description)
    }
}

fn object(
    description: &str,
    properties: &[(&str, JSONSchemaProps)],
    required: &[&str],
) -> JSONSchemaProps {
    JSONSchemaProps {
        type_: Some("object".to_owned()),
        description: Some(description.to_owned()),
        properties: Some(
            properties
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect::<BTreeMap<_, _>>(),
        ),
        required: (!required.is_empty())
            .then(|| required.iter().map(|r| (*r).to_owned()).collect()),
        ..Default::default()
    }
}

/// A list keyed by `key`, so server-side apply merges entries instead of replacing the list.
fn map_list(description: &str, item: JSONSchemaProps, key: &str) -> JSONSchemaProps {
    JSONSchemaProps {
        type_: Some("array".to_owned()),
        description: Some(description.to_owned()),
        items: Some(JSONSchemaPropsOrArray::Schema(Box::new(item))),
        x_kubernetes_list_type: Some("map".to_owned()),
        x_kubernetes_list_map_keys: Some(vec![key.to_owned()]),
        ..Default::default()
    }
}

/// The schema of a composition's `status`.
pub fn status_schema() -> JSONSchemaProps {
    let condition = object(
        "A standard Kubernetes condition.",
        &[
            (
                "type",
                string("Type of the condition, e.g. Ready or Installed."),
            ),
            (
                "status",
                JSONSchemaProps {
                    enum_: Some(
                        ["True", "False", "Unknown"]
                            .into_iter()
                            .map(|s| JSON(s.into()))
                            .collect(),
                    ),
                    ..string("True, False or Unknown.")
                },
            ),
            (
                "reason",
                string("PascalCase reason of the last transition."),
            ),
            ("message", string("Human-readable details.")),
            (
                "observedGeneration",
                int64("Generation the condition was computed from."),
            ),
            ("lastTransitionTime", time("When the status last changed.")),
        ],
        &["type", "status"],
    );
    let cluster = object(
        "The release of this composition on one cluster.",
        &[
            (
                "name",
                string("Cluster name (`local` for the management cluster)."),
            ),
            (
                "namespace",
                string("Namespace the chart is installed into."),
            ),
            ("release", string("Helm release name.")),
            ("revision", int64("Helm release revision.")),
            ("phase", phase("Ready, Progressing, Failed or Paused.")),
            (
                "fingerprint",
                string("Digest of chart, values, target and engine version of the last install."),
            ),
            ("message", string("Details of the last action.")),
            ("lastTransitionTime", time("When the phase last changed.")),
        ],
        &["name"],
    );
    let resource = object(
        "An object the release manages.",
        &[
            ("apiVersion", string("API version.")),
            ("kind", string("Kind.")),
            (
                "namespace",
                string("Namespace, empty for cluster-scoped objects."),
            ),
            ("name", string("Name.")),
        ],
        &[],
    );
    let resources = JSONSchemaProps {
        type_: Some("array".to_owned()),
        description: Some("Objects the releases manage.".to_owned()),
        items: Some(JSONSchemaPropsOrArray::Schema(Box::new(resource))),
        ..Default::default()
    };
    object(
        "Observed state of the composition, written by compositor.",
        &[
            (
                "conditions",
                map_list(
                    "Ready and Installed, kstatus-compatible.",
                    condition,
                    "type",
                ),
            ),
            (
                "observedGeneration",
                int64("Generation of the spec last acted on."),
            ),
            ("phase", phase("Ready, Progressing, Failed or Paused.")),
            (
                "chart",
                object(
                    "The chart the composition is installed from.",
                    &[
                        ("version", string("Chart version.")),
                        ("digest", string("sha256 digest of the chart archive.")),
                    ],
                    &[],
                ),
            ),
            (
                "clusters",
                map_list("One entry per target cluster.", cluster, "name"),
            ),
            ("resources", resources),
        ],
        &[],
    )
}
