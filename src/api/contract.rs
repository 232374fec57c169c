//! What the operator and a controller agree on, written once: who a controller is (its
//! definition and the group, version and plural it serves), the name it runs under, the flags
//! the operator starts it with, the `<namespace>/<name>` key that names a definition, a
//! composition's release name, and the names of what the operator grants for a served resource
//! (the release identity, the chart's reference role). The operator renders [`ControllerIdentity::args`]; the
//! controller parses them into the same type.

use std::fmt;
use std::str::FromStr;

/// Helm refuses release names longer than this.
pub const MAX_RELEASE_NAME: usize = 53;

/// Whether `name` is a DNS-1123 subdomain, as the API server requires of a custom resource's
/// name and of an API group: lower-case letters, digits, `-` and `.`, each dot-separated label
/// starting and ending with a letter or digit, at most 253 characters. Such a name is one path
/// segment of a request, never more.
pub fn is_dns_subdomain(name: &str) -> bool {
    let label = |l: &str| {
        let edge = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
        !l.is_empty()
            && l.len() <= 63
            && l.starts_with(edge)
            && l.ends_with(edge)
            && l.chars().all(|c| edge(c) || c == '-')
    };
    name.len() <= 253 && name.split('.').all(label)
}

/// A namespaced object's key, `<namespace>/<name>`: how a controller's `--definition` flag
/// and the owner annotation of a definition's objects name the definition.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// The namespace.
    pub namespace: String,
    /// The name.
    pub name: String,
}

impl ObjectKey {
    /// The key of `name` in `namespace`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> ObjectKey {
        ObjectKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl FromStr for ObjectKey {
    type Err = String;

    fn from_str(text: &str) -> Result<ObjectKey, String> {
        match text.split_once('/') {
            Some((namespace, name))
                if !namespace.is_empty() && !name.is_empty() && !name.contains('/') =>
            {
                Ok(ObjectKey::new(namespace, name))
            }
            _ => Err(format!("{text:?} is not <namespace>/<name>")),
        }
    }
}

/// Who a controller is and what the operator tells it: one definition version's generated
/// resource.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct ControllerIdentity {
    /// API group of the generated CRD.
    #[arg(long)]
    pub group: String,
    /// The CRD version this controller serves.
    #[arg(long)]
    pub version: String,
    /// Plural resource name of the generated CRD.
    #[arg(long = "resource")]
    pub plural: String,
    /// The definition, as `<namespace>/<name>`.
    #[arg(long)]
    pub definition: ObjectKey,
    /// Allow the chart source to name Secrets and ConfigMaps in other namespaces than the
    /// definition's (the operator passes it on when it runs with it).
    #[arg(long, env = "COMPOSITOR_ALLOW_CROSS_NAMESPACE_REFS")]
    pub allow_cross_namespace_refs: bool,
    /// Namespace of the Secrets that register remote clusters (the operator passes it when the
    /// definition places beyond the management cluster).
    #[arg(long, env = "COMPOSITOR_CLUSTERS_NAMESPACE")]
    pub clusters_namespace: Option<String>,
    /// Seconds a deleted composition waits for the compositions that depend on it to go before
    /// its release is uninstalled anyway, with a DependentsTimedOut event (the operator passes
    /// on its own).
    #[arg(
        long = "dependents-timeout",
        env = "COMPOSITOR_DEPENDENTS_TIMEOUT",
        default_value_t = DEFAULT_DEPENDENTS_TIMEOUT
    )]
    pub dependents_timeout_seconds: u64,
}

/// How long a deleted composition waits for its dependents by default, in seconds.
pub const DEFAULT_DEPENDENTS_TIMEOUT: u64 = 600;

impl ControllerIdentity {
    /// The name of its Deployment, ServiceAccount and leader Lease:
    /// `<plural>-<version>-controller`.
    pub fn name(&self) -> String {
        controller_name(&self.plural, &self.version)
    }

    /// The name its events are reported under (`reportingController`):
    /// `compositor-<plural>-<version>`, beside the operator's `compositor`.
    pub fn reporter(&self) -> String {
        format!("compositor-{}-{}", self.plural, self.version)
    }

    /// The arguments the operator starts it with, which [`ControllerIdentity`] parses back.
    pub fn args(&self) -> Vec<String> {
        let mut args: Vec<String> = [
            "controller",
            "--group",
            &self.group,
            "--version",
            &self.version,
            "--resource",
            &self.plural,
            "--definition",
            &self.definition.to_string(),
        ]
        .map(String::from)
        .into();
        if self.allow_cross_namespace_refs {
            args.push("--allow-cross-namespace-refs".into());
        }
        if let Some(namespace) = &self.clusters_namespace {
            args.extend(["--clusters-namespace".into(), namespace.clone()]);
        }
        // Only when it differs: an operator upgrade alone restarts no controller.
        if self.dependents_timeout_seconds != DEFAULT_DEPENDENTS_TIMEOUT {
            let seconds = self.dependents_timeout_seconds.to_string();
            args.extend(["--dependents-timeout".into(), seconds]);
        }
        args
    }
}

/// The name a controller of `plural` at `version` runs under.
pub fn controller_name(plural: &str, version: &str) -> String {
    format!("{plural}-{version}-controller")
}

/// The release name: the `compositor.dev/release-name` annotation, else the object's name;
/// Helm refuses names over 53 characters, so they are refused here first, with the reason.
pub fn release_name(annotation: Option<&str>, name: &str) -> Result<String, String> {
    let release = annotation.filter(|a| !a.is_empty()).unwrap_or(name);
    if release.len() > MAX_RELEASE_NAME {
        return Err(format!(
            "release name {release:?} is {} characters long; Helm allows {MAX_RELEASE_NAME} (set the compositor.dev/release-name annotation)",
            release.len()
        ));
    }
    Ok(release.to_string())
}

/// The generated resource a controller serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GeneratedResource {
    /// API group, e.g. `composition.compositor.dev`.
    pub group: String,
    /// CRD version name, e.g. `v1-1-5`.
    pub version: String,
    /// Plural resource name, e.g. `fireworksapps`.
    pub plural: String,
}

/// The name of a definition's release identity for `resource` in every release namespace:
/// `compositor.<definition namespace>.<plural>-<version>`, so that two definitions never share
/// one.
pub fn release_identity(definition_namespace: &str, resource: &GeneratedResource) -> String {
    format!(
        "compositor.{definition_namespace}.{}-{}",
        resource.plural, resource.version
    )
}

/// Name of a definition's cluster-scoped objects for `resource`.
pub fn cluster_name(definition_namespace: &str, resource: &GeneratedResource) -> String {
    format!(
        "compositor:{definition_namespace}:{}-{}",
        resource.plural, resource.version
    )
}

/// Name of the ClusterRole that says what the chart's own ClusterRoles may grant; no one is
/// bound to it. The admission policy derives it from a release identity's name
/// ([`release_identity`]), so the two must change together.
pub fn chart_role_name(definition_namespace: &str, resource: &GeneratedResource) -> String {
    format!("{}:chart", cluster_name(definition_namespace, resource))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// The controller's arguments as a command line of their own.
    #[derive(Parser)]
    struct Line {
        #[command(flatten)]
        identity: ControllerIdentity,
    }

    fn identity(cross: bool, clusters: Option<&str>) -> ControllerIdentity {
        ControllerIdentity {
            group: "apps.example.com".into(),
            version: "v1-1-5".into(),
            plural: "fireworksapps".into(),
            definition: ObjectKey::new("demo", "fireworksapp"),
            allow_cross_namespace_refs: cross,
            clusters_namespace: clusters.map(String::from),
            dependents_timeout_seconds: DEFAULT_DEPENDENTS_TIMEOUT,
        }
    }

    #[test]
    fn what_the_operator_renders_the_controller_parses_back() {
        let patient = ControllerIdentity {
            dependents_timeout_seconds: 3600,
            ..identity(false, None)
        };
        assert!(
            !identity(false, None)
                .args()
                .contains(&"--dependents-timeout".into())
        );
        for sent in [
            identity(false, None),
            identity(true, Some("clusters")),
            patient,
        ] {
            // The first argument, the subcommand, stands where a program name would.
            let parsed = Line::try_parse_from(sent.args()).unwrap().identity;
            assert_eq!(parsed, sent);
            assert_eq!(parsed.name(), "fireworksapps-v1-1-5-controller");
        }
    }

    #[test]
    fn a_key_is_a_namespace_and_a_name() {
        let key: ObjectKey = "demo/app".parse().unwrap();
        assert_eq!(key, ObjectKey::new("demo", "app"));
        assert_eq!(key.to_string(), "demo/app");
        for bad in ["demo", "/app", "demo/", "a/b/c", ""] {
            assert!(bad.parse::<ObjectKey>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn release_names_helm_refuses_are_refused_with_the_length() {
        assert_eq!(release_name(None, "acme").unwrap(), "acme");
        assert_eq!(release_name(Some("other"), "acme").unwrap(), "other");
        assert_eq!(release_name(Some(""), "acme").unwrap(), "acme");
        let long = "a".repeat(MAX_RELEASE_NAME + 1);
        let error = release_name(None, &long).unwrap_err();
        assert!(error.contains("54 characters long"), "{error}");
    }
}
