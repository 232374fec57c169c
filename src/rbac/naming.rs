//! Names as patterns. A footprint is learnt from one render as a probe release; what follows
//! the release in a name becomes a placeholder, filled for each composition's release. Charts
//! name most objects with Helm's standard `fullname` helper (what `helm create` writes), which
//! is the release name when that contains the chart's name and `<release>-<chart>` otherwise,
//! cut at 63 characters: such a name is kept as `{fullname:<chart>}` and filled the same way.
//! A name that a render as a release of Helm's longest name shows cut at 63 characters (as
//! helpers do with `trunc 63 | trimSuffix "-"`) starts with `{cut}` and is cut the same way.

/// Release name of the render a footprint is learnt from.
pub const PROBE_RELEASE: &str = "relprobe";
/// Release namespace of that render.
pub const PROBE_NAMESPACE: &str = "nsprobe";
/// Stands for the release name in a pattern.
pub const RELEASE: &str = "{release}";
/// Stands for the release namespace in a pattern.
pub const NAMESPACE: &str = "{namespace}";
/// Opens a `{fullname:<chart>}` placeholder.
const FULLNAME: &str = "{fullname:";
/// Starts a pattern whose filled name is cut to [`NAME_LIMIT`] characters.
const CUT: &str = "{cut}";
/// Helm's helpers cut names to this many characters (a DNS label).
const NAME_LIMIT: usize = 63;
/// The longest release name Helm accepts.
const RELEASE_LIMIT: usize = 53;

use std::collections::BTreeSet;

/// Where one composition's release goes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ReleasePlace {
    /// Release name.
    pub release: String,
    /// Release namespace.
    pub namespace: String,
}

impl ReleasePlace {
    /// `pattern` with this release's name and namespace in place of the placeholders.
    pub fn fill(&self, pattern: &str) -> String {
        if let Some(rest) = pattern.strip_prefix(CUT) {
            return cut(&self.fill(rest));
        }
        let mut filled = String::new();
        let mut rest = pattern;
        while let Some(start) = rest.find(FULLNAME) {
            let after = &rest[start + FULLNAME.len()..];
            let Some(end) = after.find('}') else { break };
            filled.push_str(&rest[..start]);
            filled.push_str(&fullname(&self.release, &after[..end]));
            rest = &after[end + 1..];
        }
        filled.push_str(rest);
        filled
            .replace(RELEASE, &self.release)
            .replace(NAMESPACE, &self.namespace)
    }
}

/// Helm's standard `fullname` of chart `chart` for release `release`.
pub fn fullname(release: &str, chart: &str) -> String {
    let full = match release.contains(chart) {
        true => release.to_string(),
        false => format!("{release}-{chart}"),
    };
    cut(&full)
}

/// `name` as Helm's helpers cut it: `trunc 63 | trimSuffix "-"`.
pub fn cut(name: &str) -> String {
    let cut: String = name.chars().take(NAME_LIMIT).collect();
    match cut.strip_suffix('-') {
        Some(trimmed) => trimmed.to_string(),
        None => cut,
    }
}

/// How the values of a probe render become patterns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Probe {
    /// Charts whose names follow Helm's `fullname` helper, longest first.
    fullnames: Vec<String>,
    /// Rendered names that are cut to 63 characters when the release's name is long.
    cut: BTreeSet<String>,
}

impl Probe {
    /// A probe whose names of `charts` follow Helm's `fullname` helper (see
    /// [`Probe::fullname_candidates`] and the check in the operator's footprint).
    pub fn with_fullnames(mut charts: Vec<String>) -> Probe {
        charts.sort_by_key(|chart| std::cmp::Reverse(chart.len()));
        Probe {
            fullnames: charts,
            cut: BTreeSet::new(),
        }
    }

    /// This probe, knowing that the rendered names `cut` are cut to 63 characters (see
    /// [`Probe::cut_names`]).
    pub fn with_cut(self, cut: BTreeSet<String>) -> Probe {
        Probe { cut, ..self }
    }

    /// A rendered value as a pattern.
    pub fn pattern(&self, rendered: &str) -> String {
        let pattern = self.uncut_pattern(rendered);
        match self.cut.contains(rendered) {
            true => format!("{CUT}{pattern}"),
            false => pattern,
        }
    }

    fn uncut_pattern(&self, rendered: &str) -> String {
        let mut value = rendered.to_string();
        for chart in &self.fullnames {
            value = value.replace(
                &format!("{PROBE_RELEASE}-{chart}"),
                &format!("{FULLNAME}{chart}}}"),
            );
        }
        value
            .replace(PROBE_RELEASE, RELEASE)
            .replace(PROBE_NAMESPACE, NAMESPACE)
    }

    /// Of `charts`, those whose `<probe release>-<chart>` appears in one of `rendered` names:
    /// the charts that may name objects with Helm's `fullname` helper.
    pub fn fullname_candidates<'a>(
        charts: impl IntoIterator<Item = &'a str>,
        rendered: &[&str],
    ) -> Vec<String> {
        charts
            .into_iter()
            .filter(|chart| {
                let full = format!("{PROBE_RELEASE}-{chart}");
                rendered.iter().any(|name| name.contains(&full))
            })
            .map(str::to_string)
            .collect()
    }

    /// The release name of the render that tells whether `chart` follows the helper: one that
    /// contains the chart's name.
    pub fn release_containing(chart: &str) -> String {
        format!("{PROBE_RELEASE}-{chart}")
    }

    /// A release name as long as Helm allows, naming no chart: rendered as it, names that
    /// follow the release show whether they are cut.
    pub fn long_release() -> String {
        let filler = "9".repeat(RELEASE_LIMIT - PROBE_RELEASE.len() - 1);
        format!("{PROBE_RELEASE}-{filler}")
    }

    /// Of the names of a probe render (`rendered`), those cut to 63 characters as the same
    /// render as [`Probe::long_release`] shows them (`long`, object for object): named after
    /// the release, longer than 63 characters once filled, and cut there.
    pub fn cut_names<S: AsRef<str>>(&self, rendered: &[S], long: &[S]) -> BTreeSet<String> {
        let place = ReleasePlace {
            release: Probe::long_release(),
            namespace: PROBE_NAMESPACE.to_string(),
        };
        rendered
            .iter()
            .zip(long)
            .map(|(name, long)| (name.as_ref(), long.as_ref()))
            .filter(|(name, long)| {
                let filled = place.fill(&self.uncut_pattern(name));
                filled != *long && cut(&filled) == *long
            })
            .map(|(name, _)| name.to_string())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(release: &str) -> ReleasePlace {
        ReleasePlace {
            release: release.into(),
            namespace: "team".into(),
        }
    }

    #[test]
    fn fullname_is_the_release_when_it_names_the_chart() {
        assert_eq!(fullname("team-agent", "agent"), "team-agent");
        assert_eq!(fullname("team", "agent"), "team-agent");
    }

    #[test]
    fn fullname_is_cut_at_63_characters_without_a_trailing_dash() {
        let release = "a".repeat(53);
        assert_eq!(
            fullname(&release, "my-agent-x"),
            format!("{release}-my-agent")
        );
        assert_eq!(
            fullname(&release, "my-agents-x"),
            format!("{release}-my-agents")
        );
        assert_eq!(fullname(&release, "agent"), format!("{release}-agent"));
    }

    #[test]
    fn a_helper_name_becomes_a_fullname_pattern_and_fills_like_helm() {
        let probe = Probe::with_fullnames(vec!["agent".into()]);
        let pattern = probe.pattern("relprobe-agent-binding");
        assert_eq!(pattern, "{fullname:agent}-binding");
        assert_eq!(place("team").fill(&pattern), "team-agent-binding");
        assert_eq!(place("team-agent").fill(&pattern), "team-agent-binding");
        assert_eq!(
            place("x").fill("{release}-{fullname:agent}:{namespace}"),
            "x-x-agent:team"
        );
    }

    #[test]
    fn without_the_helper_names_follow_the_release_as_rendered() {
        let pattern = Probe::default().pattern("relprobe-agent-binding");
        assert_eq!(pattern, "{release}-agent-binding");
        assert_eq!(
            place("team-agent").fill(&pattern),
            "team-agent-agent-binding"
        );
    }

    #[test]
    fn the_longest_chart_name_is_matched_first() {
        let probe = Probe::with_fullnames(vec!["app".into(), "app-db".into()]);
        assert_eq!(probe.pattern("relprobe-app-db-0"), "{fullname:app-db}-0");
        assert_eq!(probe.pattern("relprobe-app-0"), "{fullname:app}-0");
    }

    #[test]
    fn names_a_long_release_shows_cut_are_cut_when_filled() {
        let probe = Probe::with_fullnames(vec!["agent".into()]);
        let long = Probe::long_release();
        assert_eq!(long.len(), 53);
        let rendered = [
            "relprobe-agent-cluster-reader",
            "relprobe-agent-reader",
            "fixed",
        ];
        let cut_long = cut(&format!("{long}-agent-cluster-reader"));
        let uncut_long = format!("{long}-agent-reader");
        let long_names = [cut_long.as_str(), uncut_long.as_str(), "fixed"];
        let cut_names = probe.cut_names(&rendered, &long_names);
        assert_eq!(
            cut_names,
            ["relprobe-agent-cluster-reader".to_string()].into()
        );
        let probe = probe.with_cut(cut_names);
        let pattern = probe.pattern("relprobe-agent-cluster-reader");
        assert_eq!(pattern, "{cut}{fullname:agent}-cluster-reader");
        assert_eq!(place(&long).fill(&pattern), cut_long);
        assert_eq!(cut_long.len(), 63);
        assert_eq!(place("team").fill(&pattern), "team-agent-cluster-reader");
        assert_eq!(
            probe.pattern("relprobe-agent-reader"),
            "{fullname:agent}-reader"
        );
    }

    #[test]
    fn candidates_are_the_charts_whose_full_names_appear() {
        let rendered = ["relprobe-agent-binding", "fixed"];
        let candidates = Probe::fullname_candidates(["agent", "redis"], &rendered);
        assert_eq!(candidates, ["agent"]);
    }
}
