//! Bindings to anyone but a ServiceAccount of a release's own namespaces: a chart such as
//! sealed-secrets binds a Role on its own Service's proxy to the Group `system:authenticated`,
//! so that every user may fetch its public certificate. Such a binding is granted only as the
//! chart binds it with its default values (the footprint, names that follow the release as
//! patterns) and only once an administrator approved its line (`approval::binding_grant`);
//! some subjects no line can admit ([`refused_subject`]).
//!
//! The approved bindings reach the controller and the release policy
//! (`charts/compositor/templates/release-policy.yaml`) on the bundle's reference role, which only
//! the operator writes, in the annotation [`BINDINGS_ANNOTATION`]: one entry a line, the grant
//! line first and then, tab-separated, the binding as each release of the version names it.
//! The controller matches what a render binds against the lines' patterns filled for its
//! release; the policy, which cannot fill patterns, against the filled names, and asks the
//! authorizer whether the operator may `approve` the line.

use std::fmt;

use super::naming::ReleasePlace;
use super::power::RELEASE_IDENTITY_PREFIX;

/// The reference role's annotation that lists the approved bindings.
pub const BINDINGS_ANNOTATION: &str = "compositor.dev/bindings";

/// The reference role's annotation that names the operator (its username) whose approvals
/// its bindings are: the operator's admission policy lets it name only itself.
pub const OPERATOR_ANNOTATION: &str = "compositor.dev/operator";

/// Subjects no line can admit, of any kind but ServiceAccount: the cluster's administrators,
/// and whoever is not authenticated.
pub const REFUSED_SUBJECTS: [&str; 3] = [
    "system:masters",
    "system:unauthenticated",
    "system:anonymous",
];

/// Prefixes of the other subjects no line can admit: every ServiceAccount of the cluster
/// (`system:serviceaccounts`), those of a namespace (`system:serviceaccounts:<namespace>`, which
/// hold compositor's release identities and controllers) and one named as a user
/// (`system:serviceaccount:<namespace>:<name>`); the nodes (`system:nodes`) and each node's own
/// identities (`system:node:<name>`, `system:node-proxier`…).
pub const REFUSED_SUBJECT_PREFIXES: [&str; 2] = ["system:serviceaccount", "system:node"];

/// Who a binding grants to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Subject {
    /// `User`, `Group` or `ServiceAccount`.
    pub kind: String,
    /// A ServiceAccount's namespace.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

/// One subject of one binding: `RoleBinding <namespace>/<name> binds <Role|ClusterRole> <role>
/// to <subject>`, names as a render wrote them or as patterns.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SubjectBinding {
    /// `RoleBinding` or `ClusterRoleBinding`.
    pub kind: String,
    /// A RoleBinding's namespace.
    pub namespace: Option<String>,
    /// The binding's name.
    pub name: String,
    /// The kind of the role it binds.
    pub role_kind: String,
    /// The name of the role it binds.
    pub role: String,
    /// Who it binds the role to.
    pub subject: Subject,
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(namespace) => write!(f, "{} {namespace}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

impl fmt::Display for SubjectBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ", self.kind)?;
        if let Some(namespace) = &self.namespace {
            write!(f, "{namespace}/")?;
        }
        write!(
            f,
            "{} binds {} {} to {}",
            self.name, self.role_kind, self.role, self.subject
        )
    }
}

impl SubjectBinding {
    /// The binding as [`fmt::Display`] writes it, read back; `None` for anything else. Names
    /// hold no spaces, a subject's name may (it comes last); only a ServiceAccount's has a
    /// namespace.
    pub fn parse(text: &str) -> Option<SubjectBinding> {
        let mut parts = text.splitn(7, ' ');
        let kind = parts.next()?.to_string();
        let place = parts.next()?;
        let (binds, role_kind, role, to) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let (subject_kind, subject) = parts.next()?.split_once(' ')?;
        if binds != "binds" || to != "to" {
            return None;
        }
        let (namespace, name) = match kind.as_str() {
            "RoleBinding" => {
                let (namespace, name) = place.split_once('/')?;
                (Some(namespace.to_string()), name.to_string())
            }
            "ClusterRoleBinding" => (None, place.to_string()),
            _ => return None,
        };
        let subject = match subject_kind {
            "ServiceAccount" => {
                let (namespace, name) = subject.split_once('/')?;
                Subject {
                    kind: subject_kind.to_string(),
                    namespace: Some(namespace.to_string()),
                    name: name.to_string(),
                }
            }
            _ => Subject {
                kind: subject_kind.to_string(),
                namespace: None,
                name: subject.to_string(),
            },
        };
        Some(SubjectBinding {
            kind,
            namespace,
            name,
            role_kind: role_kind.to_string(),
            role: role.to_string(),
            subject,
        })
    }

    /// This binding's patterns filled for the release at `place`.
    pub fn fill(&self, place: &ReleasePlace) -> SubjectBinding {
        SubjectBinding {
            kind: self.kind.clone(),
            namespace: self.namespace.as_ref().map(|n| place.fill(n)),
            name: place.fill(&self.name),
            role_kind: self.role_kind.clone(),
            role: place.fill(&self.role),
            subject: Subject {
                kind: self.subject.kind.clone(),
                namespace: self.subject.namespace.as_ref().map(|n| place.fill(n)),
                name: place.fill(&self.subject.name),
            },
        }
    }

    /// The same binding of the same role, to `subject`.
    pub fn to(&self, subject: &Subject) -> SubjectBinding {
        SubjectBinding {
            subject: subject.clone(),
            ..self.clone()
        }
    }
}

/// Whether no line can admit binding anything to `subject`: [`REFUSED_SUBJECTS`] and
/// [`REFUSED_SUBJECT_PREFIXES`] whatever their kind, and of ServiceAccounts compositor's own
/// identities: a release identity (`compositor.…`) anywhere, and every account of the
/// namespaces in `reserved`, where compositor's controllers and operator run.
pub fn refused_subject(subject: &Subject, reserved: &[&str]) -> bool {
    let name = subject.name.as_str();
    match subject.kind.as_str() {
        "ServiceAccount" => {
            name.starts_with(RELEASE_IDENTITY_PREFIX)
                || subject
                    .namespace
                    .as_deref()
                    .is_none_or(|namespace| reserved.contains(&namespace))
        }
        _ => {
            REFUSED_SUBJECTS.contains(&name)
                || REFUSED_SUBJECT_PREFIXES
                    .iter()
                    .any(|prefix| name.starts_with(prefix))
        }
    }
}

/// The approved bindings an annotation [`super::approval::bindings_annotation`] wrote lists, as their grant
/// lines and patterns.
pub fn approved_bindings(annotation: &str) -> Vec<(String, SubjectBinding)> {
    annotation
        .lines()
        .filter_map(|entry| {
            let line = entry.split('\t').next()?;
            let (_, binding) = line.split_once(": ")?;
            Some((line.to_string(), SubjectBinding::parse(binding)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxier() -> SubjectBinding {
        SubjectBinding {
            kind: "RoleBinding".into(),
            namespace: Some("{namespace}".into()),
            name: "{release}-service-proxier".into(),
            role_kind: "Role".into(),
            role: "{release}-service-proxier".into(),
            subject: group("system:authenticated"),
        }
    }

    fn group(name: &str) -> Subject {
        Subject {
            kind: "Group".into(),
            namespace: None,
            name: name.into(),
        }
    }

    fn place(release: &str) -> ReleasePlace {
        ReleasePlace {
            release: release.into(),
            namespace: "team-a".into(),
        }
    }

    #[test]
    fn a_binding_is_written_and_read_back_with_its_patterns() {
        let text = proxier().to_string();
        assert_eq!(
            text,
            "RoleBinding {namespace}/{release}-service-proxier binds Role \
             {release}-service-proxier to Group system:authenticated"
        );
        assert_eq!(SubjectBinding::parse(&text), Some(proxier()));
        let cluster = "ClusterRoleBinding {release}-auth binds ClusterRole \
                       system:auth-delegator to ServiceAccount monitoring/prometheus";
        let parsed = SubjectBinding::parse(cluster).unwrap();
        assert_eq!(parsed.namespace, None);
        assert_eq!(parsed.subject.namespace.as_deref(), Some("monitoring"));
        assert_eq!(parsed.to_string(), cluster);
        // A group's name may hold spaces and slashes; it comes last.
        let odd = "RoleBinding a/b binds Role b to Group https://idp.example.com/team a";
        assert_eq!(
            SubjectBinding::parse(odd).unwrap().subject.name,
            "https://idp.example.com/team a"
        );
        for wrong in [
            "RoleBinding b binds Role b to Group g",
            "Binding a/b binds Role b to Group g",
            "RoleBinding a/b grants Role b to Group g",
            "RoleBinding a/b binds Role b to ServiceAccount app",
            "RoleBinding a/b binds Role b to Group",
        ] {
            assert_eq!(SubjectBinding::parse(wrong), None, "{wrong}");
        }
    }

    #[test]
    fn patterns_fill_for_each_release_and_only_an_exact_match_is_the_approved_binding() {
        let filled = proxier().fill(&place("sealed"));
        assert_eq!(
            filled.to_string(),
            "RoleBinding team-a/sealed-service-proxier binds Role sealed-service-proxier to \
             Group system:authenticated"
        );
        let rendered = SubjectBinding::parse(&filled.to_string()).unwrap();
        assert_eq!(proxier().fill(&place("sealed")), rendered);
        assert_ne!(proxier().fill(&place("other")), rendered);
        assert_ne!(
            proxier().fill(&place("sealed")),
            rendered.to(&group("system:authenticated-too"))
        );
    }

    #[test]
    fn some_subjects_are_refused_whatever_is_approved() {
        let reserved = ["platform", "compositor-system"];
        for name in [
            "system:masters",
            "system:nodes",
            "system:node:worker-1",
            "system:serviceaccounts",
            "system:serviceaccounts:team-a",
            "system:serviceaccount:team-a:compositor.platform.webs-v1",
            "system:unauthenticated",
            "system:anonymous",
        ] {
            for kind in ["User", "Group"] {
                let subject = Subject {
                    kind: kind.into(),
                    namespace: None,
                    name: name.into(),
                };
                assert!(refused_subject(&subject, &reserved), "{kind} {name}");
            }
        }
        let account = |namespace: &str, name: &str| Subject {
            kind: "ServiceAccount".into(),
            namespace: Some(namespace.into()),
            name: name.into(),
        };
        for refused in [
            account("team-a", "compositor.platform.webs-v1"),
            account("platform", "webs-v1-controller"),
            account("compositor-system", "compositor"),
            account("platform", "anything"),
        ] {
            assert!(refused_subject(&refused, &reserved), "{refused}");
        }
        for allowed in [
            group("system:authenticated"),
            group("developers"),
            Subject {
                kind: "User".into(),
                namespace: None,
                name: "alice".into(),
            },
            account("monitoring", "prometheus"),
        ] {
            assert!(!refused_subject(&allowed, &reserved), "{allowed}");
        }
    }

    #[test]
    fn the_annotation_lists_each_line_with_the_binding_of_every_release() {
        let annotation = super::super::approval::bindings_annotation(
            "team/sealed",
            &[proxier()],
            &[place("a"), place("b")],
        );
        assert_eq!(
            annotation,
            "team/sealed namespaced: RoleBinding {namespace}/{release}-service-proxier binds \
             Role {release}-service-proxier to Group system:authenticated\
             \tRoleBinding team-a/a-service-proxier binds Role a-service-proxier to Group \
             system:authenticated\
             \tRoleBinding team-a/b-service-proxier binds Role b-service-proxier to Group \
             system:authenticated"
        );
        let approved = approved_bindings(&annotation);
        assert_eq!(approved.len(), 1);
        assert_eq!(approved[0].1, proxier());
        assert!(
            approved[0]
                .0
                .starts_with("team/sealed namespaced: RoleBinding")
        );
        assert!(approved_bindings("").is_empty());
    }

    /// The release policy says in CEL what [`refused_subject`] says.
    #[test]
    fn the_release_policy_refuses_the_same_subjects() {
        let policy = include_str!("../../charts/compositor/templates/release-policy.yaml");
        for name in REFUSED_SUBJECTS {
            assert!(policy.contains(&format!("'{name}'")), "{name}");
        }
        for prefix in REFUSED_SUBJECT_PREFIXES {
            assert!(
                policy.contains(&format!("s.name.startsWith('{prefix}')")),
                "{prefix}"
            );
        }
        assert!(policy.contains(&format!("'{BINDINGS_ANNOTATION}'")));
        // Each installation's policies ask only their own operator, which names only itself.
        let own = include_str!("../../charts/compositor/templates/admission-policy.yaml");
        for policy in [policy, own] {
            assert!(policy.contains(&format!("'{OPERATOR_ANNOTATION}'")));
        }
    }
}
