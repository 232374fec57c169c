//! Chart versions and version ranges, read the way Helm reads them.
//!
//! Helm parses versions leniently (`v1.2.3`, `1.2`) and ranges with Masterminds semver syntax
//! (`>= 1.2 < 2`, `~1.2`, `^1`, `1.2.x`, `1.0 - 1.4`, `a || b`). This module maps both onto the
//! `semver` crate, whose pre-release rule is the one Helm users expect: a range only matches a
//! pre-release when one of its comparators names a pre-release.

use semver::{Version, VersionReq};

/// What a chart reference asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum VersionSpec {
    /// No version given: the highest stable version.
    Latest,
    /// One version: only that one (compared as SemVer, so `v1.2.3` equals `1.2.3`).
    Exact(Version),
    /// A range: the highest version matching any of the alternatives.
    Range(Vec<VersionReq>),
}

impl VersionSpec {
    /// Parses a chart reference's `version` field. An error message says what is wrong.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Ok(VersionSpec::Latest);
        }
        if let Some(version) = parse_version(spec) {
            return Ok(VersionSpec::Exact(version));
        }
        let mut alternatives = Vec::new();
        for alternative in spec.split("||") {
            let req = translate_range(alternative)?;
            alternatives
                .push(VersionReq::parse(&req).map_err(|e| format!("{}: {e}", alternative.trim()))?);
        }
        Ok(VersionSpec::Range(alternatives))
    }

    /// Whether this spec names a single version, which never changes once downloaded.
    pub fn is_exact(&self) -> bool {
        matches!(self, VersionSpec::Exact(_))
    }

    /// Whether `version` satisfies this spec.
    pub fn matches(&self, version: &Version) -> bool {
        match self {
            VersionSpec::Latest => version.pre.is_empty(),
            VersionSpec::Exact(wanted) => {
                wanted.major == version.major
                    && wanted.minor == version.minor
                    && wanted.patch == version.patch
                    && wanted.pre == version.pre
                    && (wanted.build.is_empty() || wanted.build == version.build)
            }
            VersionSpec::Range(alternatives) => alternatives.iter().any(|r| r.matches(version)),
        }
    }

    /// Picks the highest candidate that satisfies this spec. Candidates that do not parse as
    /// versions are ignored. For an exact spec, a candidate spelled exactly like `spec` wins.
    pub fn select<'a, T>(
        &self,
        spec: &str,
        candidates: impl IntoIterator<Item = (&'a str, T)>,
    ) -> Option<(&'a str, T)> {
        let mut best: Option<(Version, &'a str, T)> = None;
        for (text, item) in candidates {
            if self.is_exact() && text == spec.trim() {
                return Some((text, item));
            }
            let Some(version) = parse_version(text) else {
                continue;
            };
            if !self.matches(&version) {
                continue;
            }
            if best.as_ref().is_none_or(|(b, _, _)| version > *b) {
                best = Some((version, text, item));
            }
        }
        best.map(|(_, text, item)| (text, item))
    }
}

/// The `n` highest of `versions` (those that parse), newest first, as written.
pub fn highest<'a>(versions: impl IntoIterator<Item = &'a str>, n: usize) -> Vec<String> {
    let mut parsed: Vec<(Version, &str)> = versions
        .into_iter()
        .filter_map(|v| parse_version(v).map(|p| (p, v)))
        .collect();
    parsed.sort_by(|a, b| b.0.cmp(&a.0));
    parsed.dedup_by(|a, b| a.1 == b.1);
    parsed
        .into_iter()
        .take(n)
        .map(|(_, v)| v.to_string())
        .collect()
}

/// Parses a version leniently, like Helm: a leading `v`, missing minor or patch numbers and
/// leading zeros are accepted.
pub fn parse_version(text: &str) -> Option<Version> {
    let text = text.trim();
    let text = text
        .strip_prefix('v')
        .or_else(|| text.strip_prefix('V'))
        .unwrap_or(text);
    let split = text.find(['-', '+']).unwrap_or(text.len());
    let (core, rest) = text.split_at(split);
    let mut numbers = Vec::new();
    for part in core.split('.') {
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        numbers.push(part.parse::<u64>().ok()?);
    }
    if numbers.is_empty() || numbers.len() > 3 {
        return None;
    }
    numbers.resize(3, 0);
    Version::parse(&format!(
        "{}.{}.{}{rest}",
        numbers[0], numbers[1], numbers[2]
    ))
    .ok()
}

/// Rewrites one Masterminds alternative (no `||`) into `semver::VersionReq` syntax.
fn translate_range(alternative: &str) -> Result<String, String> {
    let alternative = alternative.trim();
    if alternative.is_empty() {
        return Err("empty alternative in version range".to_string());
    }
    // Hyphen range: `1.2 - 1.4`.
    if let Some((low, high)) = alternative.split_once(" - ") {
        return Ok(format!(
            ">={}, <={}",
            strip_v(low.trim()),
            strip_v(high.trim())
        ));
    }
    // Tokens separated by commas or spaces; an operator may stand apart from its version.
    let mut comparators = Vec::new();
    let mut pending_op = String::new();
    for token in alternative
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|t| !t.is_empty())
    {
        let (op, version) = split_operator(token);
        if version.is_empty() {
            if !pending_op.is_empty() {
                return Err(format!("operator {pending_op:?} without a version"));
            }
            pending_op = op.to_string();
            continue;
        }
        let op = if pending_op.is_empty() {
            op.to_string()
        } else if op.is_empty() {
            std::mem::take(&mut pending_op)
        } else {
            return Err(format!("two operators before {version:?}"));
        };
        comparators.push(comparator(&op, version)?);
    }
    if !pending_op.is_empty() {
        return Err(format!("operator {pending_op:?} without a version"));
    }
    Ok(comparators.join(", "))
}

fn split_operator(token: &str) -> (&str, &str) {
    let end = token
        .find(|c: char| !matches!(c, '<' | '>' | '=' | '~' | '^' | '!'))
        .unwrap_or(token.len());
    token.split_at(end)
}

fn comparator(op: &str, version: &str) -> Result<String, String> {
    let version = strip_v(version);
    let wildcard = version.split('.').all(|p| matches!(p, "*" | "x" | "X"));
    let op = match op {
        "" if wildcard => return Ok("*".to_string()),
        "" | "=" | "==" => "=",
        ">" | ">=" | "<" | "<=" | "~" | "^" => op,
        "=>" => ">=",
        "=<" => "<=",
        "~>" => "~",
        other => return Err(format!("unsupported operator {other:?}")),
    };
    Ok(format!("{op}{version}"))
}

fn strip_v(version: &str) -> &str {
    version
        .strip_prefix('v')
        .or_else(|| version.strip_prefix('V'))
        .unwrap_or(version)
}

/// The OCI tag Helm uses for a chart version: `+` is not allowed in tags and becomes `_`.
pub fn version_to_tag(version: &str) -> String {
    version.replace('+', "_")
}

/// The chart version an OCI tag stands for (`_` back to `+`).
pub fn tag_to_version(tag: &str) -> String {
    tag.replace('_', "+")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick<'a>(spec: &str, versions: &[&'a str]) -> Option<&'a str> {
        VersionSpec::parse(spec)
            .unwrap()
            .select(spec, versions.iter().map(|v| (*v, ())))
            .map(|(v, _)| v)
    }

    const VERSIONS: &[&str] = &[
        "1.0.0",
        "1.1.5",
        "1.1.6",
        "1.2.0-rc.1",
        "2.0.0",
        "2.1.0-beta.1",
        "v3.0.0",
        "junk",
    ];

    #[test]
    fn lenient_versions() {
        assert_eq!(parse_version("v1.19.1"), Some(Version::new(1, 19, 1)));
        assert_eq!(parse_version("1.2"), Some(Version::new(1, 2, 0)));
        assert_eq!(parse_version("1"), Some(Version::new(1, 0, 0)));
        assert_eq!(parse_version("01.02.03"), Some(Version::new(1, 2, 3)));
        assert_eq!(
            parse_version("1.2-beta.1").map(|v| v.to_string()),
            Some("1.2.0-beta.1".into())
        );
        assert_eq!(parse_version("1.2.3.4"), None);
        assert_eq!(parse_version(">=1"), None);
        assert_eq!(parse_version("latest"), None);
    }

    #[test]
    fn exact_versions_match_only_themselves() {
        assert_eq!(pick("1.1.5", VERSIONS), Some("1.1.5"));
        assert_eq!(pick("3.0.0", VERSIONS), Some("v3.0.0"));
        assert_eq!(pick("v1.1.6", VERSIONS), Some("1.1.6"));
        assert_eq!(pick("1.1.7", VERSIONS), None);
        assert_eq!(pick("1.2.0-rc.1", VERSIONS), Some("1.2.0-rc.1"));
    }

    #[test]
    fn empty_means_highest_stable() {
        assert_eq!(pick("", VERSIONS), Some("v3.0.0"));
        assert_eq!(pick("", &["1.0.0", "2.0.0-rc.1"]), Some("1.0.0"));
        assert_eq!(pick("", &["2.0.0-rc.1"]), None);
    }

    #[test]
    fn ranges_pick_the_highest_match() {
        assert_eq!(pick("~1.1", VERSIONS), Some("1.1.6"));
        assert_eq!(pick("^1", VERSIONS), Some("1.1.6"));
        assert_eq!(pick(">=1.0.0 <2.0.0", VERSIONS), Some("1.1.6"));
        assert_eq!(pick(">= 1.0.0, < 2.0.0", VERSIONS), Some("1.1.6"));
        assert_eq!(pick("1.1.x", VERSIONS), Some("1.1.6"));
        assert_eq!(pick("1.x", VERSIONS), Some("1.1.6"));
        assert_eq!(pick("*", VERSIONS), Some("v3.0.0"));
        assert_eq!(pick(">1.1.5 <1.2", VERSIONS), Some("1.1.6"));
        assert_eq!(pick("1.0.0 - 1.1.5", VERSIONS), Some("1.1.5"));
        assert_eq!(pick("~0.1 || ^2", VERSIONS), Some("2.0.0"));
        assert_eq!(pick("~>1.1.0", VERSIONS), Some("1.1.6"));
        assert_eq!(pick(">=4", VERSIONS), None);
    }

    #[test]
    fn ranges_skip_prereleases_unless_asked() {
        assert_eq!(pick(">=1.1.6 <2.0.0", VERSIONS), Some("1.1.6"));
        assert_eq!(pick(">=1.2.0-rc.0 <2.0.0", VERSIONS), Some("1.2.0-rc.1"));
        assert_eq!(pick("~2.1.0-beta.0", VERSIONS), Some("2.1.0-beta.1"));
    }

    #[test]
    fn highest_versions_come_first() {
        assert_eq!(
            highest(VERSIONS.iter().copied(), 3),
            ["v3.0.0", "2.1.0-beta.1", "2.0.0"]
        );
        assert!(highest(["junk"], 3).is_empty());
    }

    #[test]
    fn invalid_specs_are_reported() {
        for spec in [">=", "foo", "!=1.0.0", ">=1 <=", "1.0 ||", "latest"] {
            assert!(VersionSpec::parse(spec).is_err(), "{spec} was accepted");
        }
    }

    #[test]
    fn tags_and_versions_map_plus_to_underscore() {
        assert_eq!(version_to_tag("1.2.3+build.4"), "1.2.3_build.4");
        assert_eq!(tag_to_version("1.2.3_build.4"), "1.2.3+build.4");
        assert_eq!(version_to_tag("1.2.3"), "1.2.3");
    }
}
