//! ClusterRoles that aggregate others (`aggregationRule`). Such a role holds every rule of every
//! ClusterRole whose labels its selectors match, now and later, whoever wrote it: it is as broad
//! as the selectors are, and no check of its own rules can bound it. So a chart's aggregated
//! role is written only as an administrator approved it, decided when the definition is
//! applied: one [`line`] per role, naming the role (as a pattern) and every selector, exactly.
//!
//! Selectors that could gather Kubernetes' own roles (`cluster-admin`, the `system:` roles and
//! everything labelled `rbac.authorization.k8s.io/aggregate-to-*`) or compositor's are refused
//! outright ([`refusal`]), and so are `matchExpressions` (`NotIn` and `DoesNotExist` match roles
//! by what they lack, such as `cluster-admin`): only `matchLabels` can be approved.
//!
//! Once approved, the reference role (`compositor:<ns>:<plural>-<version>:chart`) carries one
//! [`entry`] per aggregated role of each release, its name and selectors filled for that
//! release, under [`AGGREGATIONS_ANNOTATION`], and their lines under
//! [`AGGREGATION_LINES_ANNOTATION`]: the operator's admission policy lets it write them only when
//! an administrator approved each line. The controller admits an aggregated role only when an
//! entry names it with exactly its selectors, and the release policy does the same.

use std::collections::BTreeMap;

use serde_json::Value;

use super::naming::{Probe, ReleasePlace};

/// Annotation of the reference role listing the aggregations its releases may write, one
/// [`entry`] per line.
pub const AGGREGATIONS_ANNOTATION: &str = "compositor.dev/aggregations";

/// Annotation of the reference role listing the approval lines of its [`AGGREGATIONS_ANNOTATION`]
/// entries, once each, one a line: the operator's admission policy asks the authorizer about
/// each before the operator may write them.
pub const AGGREGATION_LINES_ANNOTATION: &str = "compositor.dev/aggregation-lines";

/// The most selectors an aggregated role may have (the release policy looks at each in turn).
pub const MAX_SELECTORS: usize = 8;

/// The most aggregated ClusterRoles a chart may have (the operator's admission policy asks the
/// authorizer once for each).
pub const MAX_ROLES: usize = 8;

/// The labels one selector matches (`matchLabels`), by key.
pub type Selector = BTreeMap<String, String>;

/// The selectors of an `aggregationRule`, or why they are refused outright.
pub fn selectors(rule: &Value) -> Result<Vec<Selector>, String> {
    let terms = rule["clusterRoleSelectors"].as_array();
    let terms = terms.map(Vec::as_slice).unwrap_or_default();
    if terms.is_empty() {
        return Err("it selects nothing".to_string());
    }
    if terms.len() > MAX_SELECTORS {
        return Err(format!("it has more than {MAX_SELECTORS} selectors"));
    }
    let mut selectors = Vec::new();
    for term in terms {
        if term["matchExpressions"]
            .as_array()
            .is_some_and(|e| !e.is_empty())
        {
            return Err(
                "a selector uses matchExpressions: only matchLabels can be approved".into(),
            );
        }
        let labels: Selector = term["matchLabels"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(key, value)| (key.clone(), value.as_str().unwrap_or_default().to_string()))
            .collect();
        if let Some(reason) = refusal(&labels) {
            return Err(reason);
        }
        selectors.push(labels);
    }
    Ok(selectors)
}

/// Label keys of Kubernetes' own domains, which its own roles carry
/// (`kubernetes.io/bootstrapping`, `rbac.authorization.k8s.io/aggregate-to-*`), and of
/// compositor's; `app.kubernetes.io` is every application's.
fn reserved_key(key: &str) -> bool {
    let Some((domain, _)) = key.split_once('/') else {
        return false;
    };
    let under = |root: &str| domain == root || domain.ends_with(&format!(".{root}"));
    (under("kubernetes.io") && domain != "app.kubernetes.io")
        || under("k8s.io")
        || under(crate::api::GROUP)
}

/// Labels every Helm chart's objects may carry, which alone would select any chart's roles.
const GENERIC_KEYS: [&str; 3] = [
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/version",
    "helm.sh/chart",
];

/// Why a selector may never be approved: it is empty (every ClusterRole), it names a key of
/// Kubernetes' or compositor's own domains or a value of compositor's, or it holds only labels
/// any chart's objects carry.
pub fn refusal(selector: &Selector) -> Option<String> {
    if selector.is_empty() {
        return Some("a selector is empty and would select every ClusterRole".into());
    }
    if let Some(key) = selector.keys().find(|key| reserved_key(key)) {
        return Some(format!(
            "a selector names {key}, a label of Kubernetes' or compositor's own roles"
        ));
    }
    if let Some((key, value)) = selector.iter().find(|(_, v)| v.starts_with("compositor")) {
        return Some(format!(
            "a selector names {key}={value}, a label of compositor's own roles"
        ));
    }
    if selector
        .keys()
        .all(|key| GENERIC_KEYS.contains(&key.as_str()))
    {
        return Some(
            "a selector names only labels every Helm chart's objects carry (managed-by, version, chart)"
                .into(),
        );
    }
    None
}

/// The selectors as the approval line and the gate say them:
/// `matchLabels a=1,b=2 | matchLabels c=3`, keys sorted, selectors in the role's order.
pub fn describe(selectors: &[Selector]) -> String {
    let each = selectors.iter().map(|labels| {
        let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("matchLabels {}", pairs.join(","))
    });
    each.collect::<Vec<_>>().join(" | ")
}

/// The line that approves ClusterRole `role` (a pattern) aggregating `selectors` (values as
/// patterns) for `definition` (`namespace/name`), in the shape of [`super::approval::grant`]'s:
/// `team/kv cluster-wide: aggregate ClusterRole {fullname:kyverno}:admission-controller from
/// matchLabels rbac.kyverno.io/aggregate-to-admission-controller=true | matchLabels
/// app.kubernetes.io/component=admission-controller,app.kubernetes.io/instance={release},…`.
pub fn line(definition: &str, role: &str, selectors: &[Selector]) -> String {
    format!(
        "{definition} cluster-wide: aggregate ClusterRole {role} from {}",
        describe(selectors)
    )
}

/// Selectors with their values as patterns of `probe`.
pub fn patterns(selectors: Vec<Selector>, probe: &Probe) -> Vec<Selector> {
    selectors
        .into_iter()
        .map(|labels| {
            let patterned = labels.into_iter().map(|(k, v)| (k, probe.pattern(&v)));
            patterned.collect()
        })
        .collect()
}

/// Selectors with their patterns filled for `place`.
pub fn fill(selectors: &[Selector], place: &ReleasePlace) -> Vec<Selector> {
    selectors
        .iter()
        .map(|labels| {
            labels
                .iter()
                .map(|(k, v)| (k.clone(), place.fill(v)))
                .collect()
        })
        .collect()
}

/// One line of [`AGGREGATIONS_ANNOTATION`]: ClusterRole `name` may aggregate exactly
/// `selectors` (filled for its release), as approved by `line`:
/// `<name> <k=v,k=v> <k=v> => <line>`, each selector's pairs sorted by key. The release policy
/// reads it with `split`, so no part holds a space but the separators (names and labels cannot).
pub fn entry(name: &str, selectors: &[Selector], line: &str) -> String {
    let mut parts = vec![name.to_string()];
    parts.extend(selectors.iter().map(|labels| {
        let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        pairs.join(",")
    }));
    format!("{} => {line}", parts.join(" "))
}

/// An entry read back: the role it names, its selectors and its approval line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The ClusterRole's name.
    pub name: String,
    /// Exactly what it may select.
    pub selectors: Vec<Selector>,
    /// The approval line that admits it.
    pub line: String,
}

/// The entries of an [`AGGREGATIONS_ANNOTATION`] value.
pub fn entries(annotation: &str) -> Vec<Entry> {
    annotation
        .lines()
        .filter_map(|text| {
            let (head, line) = text.split_once(" => ")?;
            let mut parts = head.split(' ');
            let name = parts.next()?.to_string();
            let selectors = parts
                .map(|pairs| {
                    let pairs = pairs.split(',').filter_map(|pair| pair.split_once('='));
                    pairs.map(|(k, v)| (k.to_string(), v.to_string())).collect()
                })
                .collect();
            Some(Entry {
                name,
                selectors,
                line: line.to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> Selector {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn matchlabels_selectors_are_read_and_dangerous_ones_refused() {
        let kyverno = json!({"clusterRoleSelectors": [
            {"matchLabels": {"rbac.kyverno.io/aggregate-to-admission-controller": "true"}},
            {"matchLabels": {"app.kubernetes.io/component": "admission-controller",
                             "app.kubernetes.io/instance": "kv"}},
        ]});
        let read = selectors(&kyverno).expect("kyverno's selectors");
        assert_eq!(read.len(), 2);
        assert_eq!(
            describe(&read),
            "matchLabels rbac.kyverno.io/aggregate-to-admission-controller=true | matchLabels \
             app.kubernetes.io/component=admission-controller,app.kubernetes.io/instance=kv"
        );
        for (rule, why) in [
            (json!({"clusterRoleSelectors": []}), "selects nothing"),
            (json!({"clusterRoleSelectors": [{}]}), "every ClusterRole"),
            (
                json!({"clusterRoleSelectors": [{"matchLabels": {}}]}),
                "every ClusterRole",
            ),
            (
                json!({"clusterRoleSelectors": [{"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}}]}),
                "rbac.authorization.k8s.io/aggregate-to-admin",
            ),
            (
                json!({"clusterRoleSelectors": [{"matchLabels": {"kubernetes.io/bootstrapping": "rbac-defaults"}}]}),
                "kubernetes.io/bootstrapping",
            ),
            (
                json!({"clusterRoleSelectors": [{"matchLabels": {"compositor.dev/chart-reference": "true"}}]}),
                "compositor.dev/chart-reference",
            ),
            (
                json!({"clusterRoleSelectors": [{"matchLabels": {"app.kubernetes.io/name": "compositor"}}]}),
                "app.kubernetes.io/name=compositor",
            ),
            (
                json!({"clusterRoleSelectors": [{"matchLabels": {"app.kubernetes.io/managed-by": "Helm"}}]}),
                "every Helm chart",
            ),
            (
                json!({"clusterRoleSelectors": [{"matchLabels": {"a": "b"},
                        "matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]}]}),
                "matchExpressions",
            ),
        ] {
            let refused = selectors(&rule).expect_err(why);
            assert!(refused.contains(why), "{refused}");
        }
    }

    #[test]
    fn lines_name_the_role_and_every_selector_as_patterns_and_entries_fill_them() {
        let probe = Probe::with_fullnames(vec!["kyverno".into()]);
        let rendered = vec![
            labels(&[("rbac.kyverno.io/aggregate-to-admission-controller", "true")]),
            labels(&[
                ("app.kubernetes.io/component", "admission-controller"),
                ("app.kubernetes.io/instance", "relprobe"),
                ("app.kubernetes.io/part-of", "relprobe-kyverno"),
            ]),
        ];
        let selectors = patterns(rendered, &probe);
        let role = probe.pattern("relprobe-kyverno:admission-controller");
        let line = line("team/kv", &role, &selectors);
        assert_eq!(
            line,
            "team/kv cluster-wide: aggregate ClusterRole {fullname:kyverno}:admission-controller \
             from matchLabels rbac.kyverno.io/aggregate-to-admission-controller=true | matchLabels \
             app.kubernetes.io/component=admission-controller,app.kubernetes.io/instance={release},\
             app.kubernetes.io/part-of={fullname:kyverno}"
        );
        for (release, name, part_of) in [
            (
                "team-kyverno",
                "team-kyverno:admission-controller",
                "team-kyverno",
            ),
            ("kv", "kv-kyverno:admission-controller", "kv-kyverno"),
        ] {
            let place = ReleasePlace {
                release: release.into(),
                namespace: "team".into(),
            };
            let filled = fill(&selectors, &place);
            let text = entry(&place.fill(&role), &filled, &line);
            assert_eq!(
                text,
                format!(
                    "{name} rbac.kyverno.io/aggregate-to-admission-controller=true \
                     app.kubernetes.io/component=admission-controller,\
                     app.kubernetes.io/instance={release},app.kubernetes.io/part-of={part_of} \
                     => {line}"
                )
            );
            let read = entries(&format!("{text}\nnot an entry"));
            assert_eq!(
                read,
                [Entry {
                    name: name.into(),
                    selectors: filled,
                    line: line.clone()
                }]
            );
        }
    }
}
