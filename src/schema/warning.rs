//! What a conversion lost, and where.

use std::fmt;

/// One lossy step of a schema conversion.
///
/// The path names the field of the custom resource (`spec.image.tag`), so a platform engineer
/// can find it with `kubectl explain`. Lists are written `[*]`, map values `{*}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Warning {
    /// Field of the custom resource the step applies to.
    pub path: String,
    /// The JSON Schema keyword (or shape) that could not be carried over as is.
    pub keyword: String,
    /// What was done instead.
    pub action: String,
}

impl Warning {
    /// A warning for `path` about `keyword`.
    pub fn new(path: &str, keyword: &str, action: impl Into<String>) -> Self {
        Self {
            path: path.to_owned(),
            keyword: keyword.to_owned(),
            action: action.into(),
        }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One line, so a list of warnings stays greppable.
        let action = self.action.replace('\n', " ");
        write!(f, "{}: {}: {}", self.path, self.keyword, action)
    }
}

/// Builds the field paths used in warnings.
pub(crate) fn child(path: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        format!("{path}.{key}")
    } else {
        // Keys with dots or spaces would make a dotted path ambiguous.
        format!("{path}[{}]", serde_json::Value::String(key.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_one_line() {
        let w = Warning::new("spec.a", "anyOf", "dropped\nbecause");
        assert_eq!(w.to_string(), "spec.a: anyOf: dropped because");
    }

    #[test]
    fn child_paths_quote_unusual_keys() {
        assert_eq!(child("spec", "image"), "spec.image");
        assert_eq!(child("spec", "a.b/c"), "spec[\"a.b/c\"]");
    }
}
