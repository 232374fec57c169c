//! Facts about JSON Schema keywords and about what the apiserver accepts for them.

use super::warning::child;

/// How a conversion step moves through the value tree, for warning paths.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Step {
    /// The subschema describes the same value (`allOf`, `not`, `if`).
    Same,
    /// The subschema describes a named member (`properties`).
    Property,
    /// The subschema describes list items.
    Items,
    /// The subschema describes the values of a map.
    Map,
}

/// Where a keyword's value sits: a subschema, a list or map of subschemas, or plain data.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Position {
    /// One subschema.
    Schema(Step),
    /// A list of subschemas (or, for `items`, one subschema).
    SchemaArray(Step),
    /// A map of names to subschemas.
    SchemaMap(Step),
    /// Data (`enum`, `default`, `const`, …) or an annotation; never walked as a schema.
    Value,
}

/// The position of `keyword` inside a schema object. Walking only these positions keeps a
/// property *named* `properties`, `type` or `$ref` from being read as a keyword.
pub(crate) fn position(keyword: &str) -> Position {
    match keyword {
        "properties" => Position::SchemaMap(Step::Property),
        "patternProperties" => Position::SchemaMap(Step::Map),
        "dependentSchemas" | "dependencies" => Position::SchemaMap(Step::Same),
        "items" | "prefixItems" => Position::SchemaArray(Step::Items),
        "additionalItems" | "unevaluatedItems" | "contains" => Position::Schema(Step::Items),
        "additionalProperties" | "unevaluatedProperties" => Position::Schema(Step::Map),
        "allOf" | "anyOf" | "oneOf" => Position::SchemaArray(Step::Same),
        "not" | "if" | "then" | "else" | "propertyNames" => Position::Schema(Step::Same),
        _ => Position::Value,
    }
}

/// The warning path one step below `path`.
pub(crate) fn step_path(path: &str, step: Step, name: Option<&str>) -> String {
    match (step, name) {
        (Step::Property, Some(name)) => child(path, name),
        (Step::Items, _) => format!("{path}[*]"),
        (Step::Map, _) => format!("{path}{{*}}"),
        _ => path.to_owned(),
    }
}

/// Whether the apiserver validates `format` for values of `ty` with the meaning JSON Schema
/// gives it. Unknown formats are ignored by the apiserver, so dropping them loses nothing there;
/// `duration` is dropped because Kubernetes reads it as a Go duration (`5m`), JSON Schema as
/// ISO 8601 (`PT5M`), and keeping it would reject values the chart accepts.
pub(crate) fn format_known(format: &str, ty: &str) -> bool {
    match ty {
        "string" => matches!(
            format,
            "bsonobjectid"
                | "uri"
                | "email"
                | "hostname"
                | "ipv4"
                | "ipv6"
                | "cidr"
                | "mac"
                | "uuid"
                | "uuid3"
                | "uuid4"
                | "uuid5"
                | "isbn"
                | "isbn10"
                | "isbn13"
                | "creditcard"
                | "ssn"
                | "hexcolor"
                | "rgbcolor"
                | "byte"
                | "password"
                | "date"
                | "date-time"
                | "datetime"
        ),
        "integer" => matches!(format, "int32" | "int64"),
        "number" => matches!(format, "float" | "double"),
        _ => false,
    }
}

/// Checks that `pattern` means the same to Go's RE2 (the apiserver) and to Rust's `regex`.
///
/// Both reject look-around and back-references. Where they differ, the pattern is refused:
/// escapes Go lacks (`\u`, `\U`, `\z` is fine), class set operations and nested classes (Rust
/// only), named groups `(?<n>…)` (Go before 1.22), flags other than `imsU`, long Unicode class
/// names, and repeat counts above Go's limit of 1000.
pub(crate) fn re2_compatible(pattern: &str) -> Result<(), String> {
    go_only_syntax(pattern)?;
    regex::Regex::new(pattern).map_err(|e| {
        e.to_string()
            .lines()
            .last()
            .unwrap_or("invalid pattern")
            .trim()
            .to_owned()
    })?;
    Ok(())
}

/// Finds syntax outside what Go's RE2 and Rust's `regex` read alike, scanning the pattern once.
fn go_only_syntax(pattern: &str) -> Result<(), String> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut i = 0;
    // Where the open character class's members start, while inside one.
    let mut class_start: Option<usize> = None;
    while i < chars.len() {
        if chars[i] == '\\' {
            escape(&chars[i..])?;
            i += 2;
        } else if let Some(start) = class_start {
            if class_member(&chars, i, start)? {
                class_start = None;
            }
            i += 1;
        } else if let Some(len) = repeat_len(&chars[i..]) {
            i = after_repetition(&chars, i, len)?;
        } else if chars[i] == '[' {
            let (start, last) = class_opening(&chars, i);
            class_start = Some(start);
            i = last + 1;
        } else {
            if chars[i] == '(' && chars.get(i + 1) == Some(&'?') {
                group_flags(&chars[i + 2..])?;
            }
            i += 1;
        }
    }
    Ok(())
}

/// Checks the escape at the start of `chars` (a backslash and what follows).
fn escape(chars: &[char]) -> Result<(), String> {
    let Some(&next) = chars.get(1) else {
        return Err("trailing backslash".to_owned());
    };
    match next {
        'u' | 'U' => Err("\\u escapes are not supported by RE2 (use \\x{...})".to_owned()),
        'p' | 'P' if chars.get(2) == Some(&'{') => {
            let name: String = chars[3..].iter().take_while(|&&c| c != '}').collect();
            let short = name.len() <= 2 && name.chars().all(|c| c.is_ascii_alphabetic());
            let script = GO_SCRIPTS.contains(&name.as_str());
            if short || script {
                Ok(())
            } else {
                Err(format!("Unicode class {name:?} may not be known to RE2"))
            }
        }
        _ => Ok(()),
    }
}

/// Checks the character at `i` inside a class whose members start at `start`; whether it
/// closes the class.
fn class_member(chars: &[char], i: usize, start: usize) -> Result<bool, String> {
    let c = chars[i];
    match c {
        ']' if i > start + 1 || (i == start + 1 && chars[start] != '^') => Ok(true),
        '[' if chars.get(i + 1) != Some(&':') => Err("nested character class".to_owned()),
        '&' | '-' | '~' if chars.get(i + 1) == Some(&c) => {
            Err("character class set operation".to_owned())
        }
        _ => Ok(false),
    }
}

/// Where scanning goes on after the repetition operator of `len` characters at `i`, once its
/// counts and what follows it are checked.
fn after_repetition(chars: &[char], i: usize, len: usize) -> Result<usize, String> {
    if counts_too_big(&chars[i..i + len]) {
        return Err("repeat count above 1000".to_owned());
    }
    let mut next = i + len;
    if chars.get(next) == Some(&'?') {
        // A lazy quantifier, fine in both.
        next += 1;
    }
    if repeat_len(&chars[next..]).is_some() {
        return Err("stacked repetition operators (Go rejects `a**`, `a++`)".to_owned());
    }
    Ok(next)
}

/// The class opening with the `[` at `i`: where its members start, and the index of its last
/// opening character (`[`, `[^`, and a `]` right after either, which is a literal in both
/// syntaxes).
fn class_opening(chars: &[char], mut i: usize) -> (usize, usize) {
    let start = i + 1;
    if chars.get(i + 1) == Some(&'^') {
        i += 1;
    }
    if chars.get(i + 1) == Some(&']') {
        i += 1;
    }
    (start, i)
}

/// Checks what follows `(?`: look-around, named groups and flags.
fn group_flags(after: &[char]) -> Result<(), String> {
    let flags: String = after
        .iter()
        .take_while(|&&c| c != ')' && c != ':')
        .collect();
    if ["=", "!", "<=", "<!"].iter().any(|l| flags.starts_with(l)) {
        return Err("look-around is not supported by RE2".to_owned());
    }
    if flags.starts_with('<') || flags.starts_with('P') {
        if !flags.starts_with("P<") {
            return Err("named group syntax not supported by RE2".to_owned());
        }
    } else if !flags
        .chars()
        .all(|c| matches!(c, 'i' | 'm' | 's' | 'U' | '-'))
    {
        return Err(format!("group flags {flags:?} not supported by RE2"));
    }
    Ok(())
}

/// The length of a repetition operator at the start of `chars` (`*`, `+`, `?`, `{n}`, `{n,}`,
/// `{n,m}`), if there is one.
fn repeat_len(chars: &[char]) -> Option<usize> {
    match chars.first()? {
        '*' | '+' | '?' => Some(1),
        '{' => {
            let close = chars.iter().position(|&c| c == '}')?;
            let inner: String = chars[1..close].iter().collect();
            let (min, max) = inner.split_once(',').unwrap_or((&inner, "0"));
            let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
            (!min.is_empty() && digits(min) && digits(max)).then_some(close + 1)
        }
        _ => None,
    }
}

fn counts_too_big(op: &[char]) -> bool {
    let text: String = op.iter().collect();
    text.trim_matches(|c| c == '{' || c == '}')
        .split(',')
        .filter_map(|n| n.parse::<u64>().ok())
        .any(|n| n > 1000)
}

/// Scripts Go's `unicode` package knows that are common in schemas; others are refused.
const GO_SCRIPTS: &[&str] = &[
    "Arabic",
    "Armenian",
    "Bengali",
    "Cyrillic",
    "Devanagari",
    "Georgian",
    "Greek",
    "Han",
    "Hangul",
    "Hebrew",
    "Hiragana",
    "Katakana",
    "Latin",
    "Thai",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_both_engines_accept() {
        for p in [
            "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
            "^(Always|Never|IfNotPresent)$",
            r"^\d+(\.\d+)?[KMG]i?$",
            "[]a]",
            "[^]a]",
            "(?i)abc",
            "(?P<name>x)",
            r"\p{Greek}+",
            r"\pL",
            "a{2,1000}",
            "a+?b*?",
            "(a+)+",
            "x{2}?",
            "[[:alpha:]]",
            r"^\S+$",
        ] {
            assert_eq!(re2_compatible(p), Ok(()), "{p}");
        }
    }

    #[test]
    fn patterns_re2_rejects() {
        for p in [
            "(?=a)b",
            "(?!a)b",
            "(?<=a)b",
            r"(a)\1",
            r"\u0041",
            r"\Z",
            "a++",
            "a**",
            "a{2}{3}",
            "a{,3}",
            "(?<name>x)",
            "(?x) a",
            "[a-z&&[^x]]",
            "[a[b]]",
            "a{1001}",
            r"\p{Letter}",
            "(",
        ] {
            assert!(re2_compatible(p).is_err(), "{p}");
        }
    }

    #[test]
    fn formats_by_type() {
        assert!(format_known("date-time", "string"));
        assert!(format_known("int64", "integer"));
        assert!(!format_known("int64", "string"));
        assert!(!format_known("uri-reference", "string"));
        assert!(!format_known("duration", "string"));
    }
}
