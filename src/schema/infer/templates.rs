//! How a chart's templates read its values: which maps they read key by key (so an unknown key
//! there is a mistake), which they use whole (render as YAML, range over, hand to a helper, so
//! any key may matter), which numbers they do float arithmetic with, and whether they read
//! `.Values` itself whole (then any top-level key may matter).
//!
//! Templates are scanned, not executed: every `.Values.a.b` names the path `a.b`, read whole;
//! its ancestors are entered by name. That errs towards open: a map a template holds in a
//! variable or hands to `with` counts as used whole.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use regex::Regex;

use crate::chart::{ChartType, Package};

/// `.Values` and the field chain after it.
static REFERENCE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)*)").expect("a valid expression")
});

/// A template action.
static ACTION: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?s)\{\{.*?\}\}").expect("a valid expression"));

/// Sprig's float functions: a value they receive is meant to be fractional.
const FLOAT_FUNCTIONS: &[&str] = &[
    "float64", "addf", "add1f", "subf", "mulf", "divf", "maxf", "minf", "ceil", "floor", "round",
];

/// What the templates of a chart and its subcharts read of the values.
#[derive(Debug, Default)]
pub(crate) struct References {
    /// Paths some template reads whole.
    whole: BTreeSet<String>,
    /// Paths some template reads a named key of.
    entered: BTreeSet<String>,
    /// Paths some template does float arithmetic with.
    float: BTreeSet<String>,
    /// The first template that reads `.Values` whole, if one does.
    pub dynamic: Option<String>,
}

impl References {
    /// The references of `package`'s templates and those of its subcharts, each under its
    /// values key (`keys` gives, per subchart index, the keys it takes).
    pub(crate) fn of(package: &Package, keys: &[(usize, String)]) -> Self {
        let mut refs = References::default();
        refs.add_chart(package, "", keys);
        refs
    }

    fn add_chart(&mut self, package: &Package, prefix: &str, keys: &[(usize, String)]) {
        for template in &package.templates {
            self.add_template(prefix, &template.content, &template.path, false);
        }
        for (index, sub) in package.subcharts.iter().enumerate() {
            if sub.metadata.chart_type == ChartType::Library {
                // A library's helpers run on the values of the chart that includes them, and
                // read the keys their callers name: their reads count at this chart's root,
                // but reading the root whole is not taken as reading any key.
                for template in &sub.templates {
                    self.add_template(prefix, &template.content, &template.path, true);
                }
                continue;
            }
            for (_, key) in keys.iter().filter(|(i, _)| *i == index) {
                let below = format!("{prefix}{key}.");
                self.add_chart(sub, &below, &super::subchart_keys(sub));
            }
        }
    }

    fn add_template(&mut self, prefix: &str, text: &str, file: &str, library: bool) {
        for action in ACTION.find_iter(text) {
            let action = action.as_str();
            let inner = action
                .trim_start_matches("{{")
                .trim_start_matches('-')
                .trim_start();
            if inner.starts_with("/*") {
                // A template comment: its text is read by people only.
                continue;
            }
            let float = action
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .any(|word| FLOAT_FUNCTIONS.contains(&word));
            for found in REFERENCE.captures_iter(action) {
                let end = found.get(0).map_or(0, |m| m.end());
                let next = action[end..].chars().next();
                if next.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                    // `.ValuesFrom` and the like: not the values.
                    continue;
                }
                let chain = found.get(1).map_or("", |m| m.as_str());
                let keys: Vec<&str> = chain.split('.').skip(1).collect();
                if keys.is_empty() && prefix.is_empty() {
                    if !library && self.dynamic.is_none() {
                        self.dynamic = Some(file.to_owned());
                    }
                    continue;
                }
                let mut path = prefix.trim_end_matches('.').to_owned();
                for key in &keys {
                    self.entered.insert(path.clone());
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(key);
                }
                if float {
                    self.float.insert(path.clone());
                }
                self.whole.insert(path);
            }
        }
    }

    /// Whether templates read named keys of the map at `path`, and neither it nor a map it is
    /// in whole: only then is an unknown key below it certainly unread.
    pub(crate) fn read_by_key(&self, path: &str) -> bool {
        self.entered.contains(path) && !self.read_whole(path)
    }

    /// Whether a template reads the value at `path`, or a map it is in, whole.
    pub(crate) fn read_whole(&self, path: &str) -> bool {
        let mut at = path;
        loop {
            if self.whole.contains(at) {
                return true;
            }
            match at.rsplit_once('.') {
                Some((parent, _)) => at = parent,
                None => return false,
            }
        }
    }

    /// Whether a template does float arithmetic with the value at `path`.
    pub(crate) fn in_float_arithmetic(&self, path: &str) -> bool {
        self.float.contains(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chart::TemplateFile;

    fn chart(templates: &[&str]) -> Package {
        let mut package = Package::bare("demo", serde_json::json!({}));
        package.templates = templates
            .iter()
            .enumerate()
            .map(|(i, content)| TemplateFile {
                path: format!("templates/t{i}.yaml"),
                content: (*content).to_owned(),
            })
            .collect();
        package
    }

    #[test]
    fn maps_read_key_by_key_are_told_from_maps_used_whole() {
        let package = chart(&[
            "image: {{ .Values.image.repository }}:{{ .Values.image.tag }}\n{{ toYaml .Values.resources.limits }}\n{{- with $.Values.service }}{{ .port }}{{ end }}\n{{ .Values.service.type }}",
        ]);
        let refs = References::of(&package, &[]);
        assert!(refs.read_by_key("image"));
        assert!(refs.read_by_key("resources"));
        assert!(!refs.read_by_key("resources.limits"));
        assert!(!refs.read_by_key("service"));
        assert!(!refs.read_by_key("unread"));
        assert_eq!(refs.dynamic, None);
    }

    #[test]
    fn values_read_whole_and_float_arithmetic_are_seen() {
        let package = chart(&[
            "{{ .Values.a }}",
            "{{ mulf .Values.ratio 100 }} {{ .Values.count }}\n{{ toYaml .Values | b64enc }}",
        ]);
        let refs = References::of(&package, &[]);
        assert!(refs.in_float_arithmetic("ratio"));
        assert!(!refs.in_float_arithmetic("count"));
        assert_eq!(refs.dynamic.as_deref(), Some("templates/t1.yaml"));
    }
}
