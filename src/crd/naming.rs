//! Names of a generated CRD: group, kind, plural, version name, derived from Chart.yaml and
//! overridable, each checked against the apiserver's rules before anything is applied.

use super::Error;
use crate::api::{NameOverrides, is_dns_subdomain};

/// The API group of generated CRDs unless a definition names another.
pub const DEFAULT_GROUP: &str = "composition.compositor.dev";

/// The names of one generated CRD.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Names {
    /// API group, e.g. `composition.compositor.dev`.
    pub group: String,
    /// Kind, e.g. `FireworksApp`.
    pub kind: String,
    /// Kind of lists, e.g. `FireworksAppList`.
    pub list_kind: String,
    /// Plural resource name, e.g. `fireworksapps`.
    pub plural: String,
    /// Singular resource name, e.g. `fireworksapp`.
    pub singular: String,
    /// Short names for kubectl.
    pub short_names: Vec<String>,
}

impl Names {
    /// Derives the names from a chart name and applies `overrides`, checking every result.
    pub fn new(chart_name: &str, overrides: &NameOverrides) -> Result<Self, Error> {
        let kind = match &overrides.kind {
            Some(k) => k.clone(),
            None => kind_from_chart(chart_name),
        };
        check_kind(&kind)?;
        let singular = kind.to_lowercase();
        let plural = match &overrides.plural {
            Some(p) => p.clone(),
            None => plural_of(&singular),
        };
        check_label("plural", &plural)?;
        let group = overrides
            .group
            .clone()
            .unwrap_or_else(|| DEFAULT_GROUP.to_owned());
        check_group(&group)?;
        for s in &overrides.short_names {
            check_label("shortNames", s)?;
        }
        let crd_name = format!("{plural}.{group}");
        if crd_name.len() > 253 {
            return Err(Error::InvalidName {
                field: "name",
                value: crd_name,
                problem: "longer than 253 characters".to_owned(),
            });
        }
        Ok(Self {
            list_kind: format!("{kind}List"),
            group,
            kind,
            plural,
            singular,
            short_names: overrides.short_names.clone(),
        })
    }

    /// The CRD's object name, `<plural>.<group>`.
    pub fn crd_name(&self) -> String {
        format!("{}.{}", self.plural, self.group)
    }
}

/// `fireworks-app` → `FireworksApp`: split on non-alphanumerics, capitalise each part.
pub fn kind_from_chart(chart_name: &str) -> String {
    chart_name
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|part| !part.is_empty())
        .map(|part| {
            let mut chars = part.chars();
            match chars.next() {
                Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
                None => String::new(),
            }
        })
        .collect()
}

/// English plural of a lower-case kind, as `kubectl` users would type it. Kubernetes' own rules
/// (`policy` → `policies`, `gateway` → `gateways`, `box` → `boxes`, `mesh` → `meshes`), except
/// that a kind already ending in `s` is taken as plural, or as a name that is its own plural
/// (`externalsecrets`, `redis`, `jenkins`), unless it ends in one of English's singular
/// endings `ss` or `us` (`ingress` → `ingresses`, `prometheus` → `prometheuses`); and a single
/// `z` after `i` or `e` doubles (`quiz` → `quizzes`).
pub fn plural_of(singular: &str) -> String {
    if reads_as_plural(singular) {
        singular.to_owned()
    } else if let Some(stem) = consonant_y_stem(singular) {
        format!("{stem}ies")
    } else if doubles_final_z(singular) {
        format!("{singular}zes")
    } else if SIBILANT_ENDINGS.iter().any(|end| singular.ends_with(end)) {
        format!("{singular}es")
    } else {
        format!("{singular}s")
    }
}

/// Endings that take `es` in the plural: `-es` keeps them a syllable of their own.
const SIBILANT_ENDINGS: [&str; 5] = ["s", "x", "z", "ch", "sh"];

/// Whether a kind ending in `s` needs no plural ending: chart names ending in `s` are mostly
/// plurals already (`secrets`, `metrics`, `credentials`, `settings`) or product names read as
/// their own plural (`redis`, `jenkins`, `thanos`, `externaldns`), where `redises` or
/// `secretses` would surprise. Only `ss` and `us` are singular endings common enough to
/// pluralise (`ingress`, `class`, `status`, `prometheus`).
fn reads_as_plural(kind: &str) -> bool {
    kind.ends_with('s') && !kind.ends_with("ss") && !kind.ends_with("us")
}

/// `polic` of `policy`: a `y` after a consonant becomes `ies`; after a vowel (`gateway`) it
/// only takes `s`.
fn consonant_y_stem(kind: &str) -> Option<&str> {
    kind.strip_suffix('y')
        .filter(|stem| stem.ends_with(|c: char| !matches!(c, 'a' | 'e' | 'i' | 'o' | 'u')))
}

/// `quiz` → `quizzes`, `fez` → `fezzes`: English doubles a single `z` after a short `i` or `e`.
fn doubles_final_z(kind: &str) -> bool {
    kind.ends_with("iz") || kind.ends_with("ez")
}

/// `v` + the chart version, lower-cased, with every run of characters outside `[a-z0-9]` as
/// `-`: `1.1.5` → `v1-1-5`, `2.0.0-RC.1` → `v2-0-0-rc-1`. Lower-casing first keeps upper-case
/// pre-release tags apart instead of collapsing them into a dash.
pub fn version_name(chart_version: &str) -> Result<String, Error> {
    // Charts versioned `v1.19.1` (cert-manager) get `v1-19-1`, not `vv1-19-1`.
    let unprefixed = match chart_version.strip_prefix(['v', 'V']) {
        Some(rest) if rest.starts_with(|c: char| c.is_ascii_digit()) => rest,
        _ => chart_version,
    };
    let mut name = String::from("v");
    let mut dash = false;
    for c in unprefixed.to_lowercase().chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            name.push(c);
            dash = false;
        } else if !dash {
            name.push('-');
            dash = true;
        }
    }
    let name = name.trim_end_matches('-').to_owned();
    check_version_name(&name)?;
    Ok(name)
}

/// A CRD version name must be a DNS-1035 label.
pub fn check_version_name(name: &str) -> Result<(), Error> {
    check_label("version", name)
}

fn check_kind(kind: &str) -> Result<(), Error> {
    let valid_chars = kind.chars().all(|c| c.is_ascii_alphanumeric());
    if !valid_chars || !kind.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return Err(Error::InvalidName {
            field: "kind",
            value: kind.to_owned(),
            problem: "must start with a letter and contain only letters and digits".to_owned(),
        });
    }
    check_label("kind", &kind.to_lowercase())
}

/// DNS-1035 label: `[a-z]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
fn check_label(field: &'static str, value: &str) -> Result<(), Error> {
    let ok = !value.is_empty()
        && value.len() <= 63
        && value.starts_with(|c: char| c.is_ascii_lowercase())
        && !value.ends_with('-')
        && value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidName {
            field,
            value: value.to_owned(),
            problem: "must be a DNS-1035 label (lower-case letters, digits and '-', starting with a letter, at most 63 characters)"
                .to_owned(),
        })
    }
}

/// DNS-1123 subdomain with at least one dot, as the apiserver requires of a CRD group.
fn check_group(group: &str) -> Result<(), Error> {
    if is_dns_subdomain(group) && group.contains('.') {
        Ok(())
    } else {
        Err(Error::InvalidName {
            field: "group",
            value: group.to_owned(),
            problem: "must be a lower-case DNS subdomain with at least one dot".to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_from_chart_names() {
        assert_eq!(kind_from_chart("fireworks-app"), "FireworksApp");
        assert_eq!(
            kind_from_chart("opentelemetry-collector"),
            "OpentelemetryCollector"
        );
        assert_eq!(kind_from_chart("my_chart.v2"), "MyChartV2");
        assert_eq!(kind_from_chart("redis"), "Redis");
    }

    #[test]
    fn plural_adds_s_by_default() {
        assert_eq!(plural_of("fireworksapp"), "fireworksapps");
        assert_eq!(plural_of("postgresql"), "postgresqls");
        assert_eq!(plural_of("cluster"), "clusters");
    }

    #[test]
    fn plural_of_consonant_y_is_ies() {
        assert_eq!(plural_of("policy"), "policies");
        assert_eq!(plural_of("registry"), "registries");
    }

    #[test]
    fn plural_of_vowel_y_adds_s() {
        assert_eq!(plural_of("gateway"), "gateways");
        assert_eq!(plural_of("key"), "keys");
    }

    #[test]
    fn plural_of_ss_adds_es() {
        assert_eq!(plural_of("ingress"), "ingresses");
        assert_eq!(plural_of("class"), "classes");
    }

    #[test]
    fn plural_of_us_adds_es() {
        assert_eq!(plural_of("status"), "statuses");
        assert_eq!(plural_of("prometheus"), "prometheuses");
    }

    #[test]
    fn kind_already_plural_stays() {
        assert_eq!(plural_of("externalsecrets"), "externalsecrets");
        assert_eq!(plural_of("metrics"), "metrics");
        assert_eq!(plural_of("credentials"), "credentials");
        assert_eq!(plural_of("settings"), "settings");
        assert_eq!(plural_of("tools"), "tools");
        assert_eq!(plural_of("policies"), "policies");
    }

    #[test]
    fn name_ending_in_s_is_its_own_plural() {
        assert_eq!(plural_of("redis"), "redis");
        assert_eq!(plural_of("jenkins"), "jenkins");
        assert_eq!(plural_of("thanos"), "thanos");
        assert_eq!(plural_of("externaldns"), "externaldns");
    }

    #[test]
    fn plural_of_x_adds_es() {
        assert_eq!(plural_of("box"), "boxes");
        assert_eq!(plural_of("keycloakx"), "keycloakxes");
    }

    #[test]
    fn plural_of_ch_and_sh_adds_es() {
        assert_eq!(plural_of("match"), "matches");
        assert_eq!(plural_of("batch"), "batches");
        assert_eq!(plural_of("mesh"), "meshes");
    }

    #[test]
    fn plural_of_single_z_after_i_or_e_doubles_it() {
        assert_eq!(plural_of("quiz"), "quizzes");
        assert_eq!(plural_of("fez"), "fezzes");
    }

    #[test]
    fn plural_of_other_z_adds_es() {
        assert_eq!(plural_of("buzz"), "buzzes");
        assert_eq!(plural_of("waltz"), "waltzes");
    }

    #[test]
    fn plural_of_f_and_fe_adds_s() {
        assert_eq!(plural_of("proof"), "proofs");
        assert_eq!(plural_of("safe"), "safes");
    }

    #[test]
    fn plural_of_o_adds_s() {
        assert_eq!(plural_of("repo"), "repos");
        assert_eq!(plural_of("argo"), "argos");
    }

    #[test]
    fn secrets_chart_keeps_its_plural() {
        let n = Names::new("external-secrets", &NameOverrides::default()).unwrap();
        assert_eq!(n.kind, "ExternalSecrets");
        assert_eq!(n.plural, "externalsecrets");
        assert_eq!(n.crd_name(), "externalsecrets.composition.compositor.dev");
    }

    #[test]
    fn version_names() {
        assert_eq!(version_name("1.1.5").unwrap(), "v1-1-5");
        assert_eq!(version_name("2.0.4+aa1b838").unwrap(), "v2-0-4-aa1b838");
        assert_eq!(version_name("1.0.0-RC.1").unwrap(), "v1-0-0-rc-1");
        assert_eq!(version_name("v1.19.1").unwrap(), "v1-19-1");
        assert_eq!(version_name("V2.0").unwrap(), "v2-0");
        assert_eq!(version_name("very-1").unwrap(), "vvery-1");
        assert!(version_name(&"1.".repeat(40)).is_err());
    }

    #[test]
    fn names_with_overrides_are_checked() {
        let n = Names::new("fireworks-app", &NameOverrides::default()).unwrap();
        assert_eq!(n.kind, "FireworksApp");
        assert_eq!(n.plural, "fireworksapps");
        assert_eq!(n.list_kind, "FireworksAppList");
        assert_eq!(n.crd_name(), "fireworksapps.composition.compositor.dev");
        let bad = NameOverrides {
            group: Some("nodots".to_owned()),
            ..Default::default()
        };
        assert_eq!(Names::new("x", &bad).unwrap_err().reason(), "InvalidName");
        assert!(Names::new("3scale", &NameOverrides::default()).is_err());
        let custom = NameOverrides {
            kind: Some("Tenant".to_owned()),
            short_names: vec!["tn".to_owned()],
            ..Default::default()
        };
        let n = Names::new("cert-manager", &custom).unwrap();
        assert_eq!((n.kind.as_str(), n.plural.as_str()), ("Tenant", "tenants"));
    }
}
