//! A failed Helm call, what its message says, and what of it may be shown.

use std::time::Duration;

/// Longest part of Helm's stderr kept in an error message.
pub(super) const MESSAGE_LIMIT: usize = 1024;

/// A failed Helm call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No `helm` binary could be found.
    #[error("helm not found: pass --helm, set HELM_BIN, or put helm on PATH")]
    NotFound,
    /// The call could not be started or its files written.
    #[error("cannot run helm {verb}")]
    Spawn {
        /// The helm subcommand.
        verb: &'static str,
        /// What went wrong.
        #[source]
        source: std::io::Error,
    },
    /// The call ran longer than the engine's timeout and was killed.
    #[error("helm {verb} timed out after {timeout:?}")]
    Timeout {
        /// The helm subcommand.
        verb: &'static str,
        /// The limit.
        timeout: Duration,
    },
    /// Helm exited non-zero; `message` is its stderr, shortened.
    #[error("helm {verb} failed: {message}")]
    Failed {
        /// The helm subcommand.
        verb: &'static str,
        /// Helm's own words.
        message: String,
    },
    /// Helm ran out of the memory a call may take ([`super::limits::ADDRESS_SPACE_LIMIT`] of address
    /// space for a process, [`super::limits::ENGINE_CALL_HEAP`] of live heap for a call in a resident engine).
    #[error(
        "helm {verb} ran out of memory: the chart's render with these values needs more than the {limit_mib} MiB a Helm call may take"
    )]
    OutOfMemory {
        /// The helm subcommand.
        verb: &'static str,
        /// The limit it reached, in MiB.
        limit_mib: u64,
    },
    /// A Helm call took more CPU time than a call may ([`super::limits::CALL_CPU_LIMIT`]): the chart's
    /// templates, with these values, do more work than any chart's install needs.
    #[error(
        "helm {verb} took more than the {seconds} s of CPU time a Helm call may take: the chart's templates with these values do too much work"
    )]
    OutOfCpu {
        /// The helm subcommand.
        verb: &'static str,
        /// The limit it reached, in seconds.
        seconds: f64,
    },
    /// The resident engine ended during the call for a reason other than memory: `how` says
    /// how it exited, never what its crash report held (that goes to the log).
    #[error(
        "helm {verb} stopped: the Helm engine ended during the call ({how}); its report is in the controller's log"
    )]
    Crashed {
        /// The helm subcommand.
        verb: &'static str,
        /// How it exited.
        how: String,
    },
    /// Helm succeeded but printed something other than the JSON it documents.
    #[error("helm {verb} printed unexpected output")]
    Output {
        /// The helm subcommand.
        verb: &'static str,
        /// Why it does not parse.
        #[source]
        source: serde_json::Error,
    },
}

/// Whether Go's runtime stopped its process for want of memory, past its address space or its
/// data limit: "fatal error: out of memory", "fatal error: runtime: out of memory" or "fatal
/// error: runtime: cannot allocate memory", depending on where the allocation failed.
pub(super) fn ran_out_of_memory(stderr: &str) -> bool {
    stderr.lines().any(|line| {
        line.starts_with("fatal error:")
            && (line.contains("out of memory") || line.contains("cannot allocate memory"))
    })
}

impl Error {
    /// Whether Kubernetes refused Helm a request (RBAC), which no retry fixes.
    pub fn is_forbidden(&self) -> bool {
        matches!(self, Error::Failed { message, .. } if message.contains(" is forbidden: "))
    }

    /// Whether the API server refused an object Helm wrote: an admission webhook or policy
    /// denied it, it is invalid, or (applied server-side) it does not fit its kind's schema (an
    /// unknown field, a wrong type). The same objects are refused again.
    pub fn is_rejected(&self) -> bool {
        const SIGNS: [&str; 4] = [
            " denied the request",
            " denied request",
            " is invalid: ",
            "failed to create typed patch object",
        ];
        matches!(self, Error::Failed { message, .. } if SIGNS.iter().any(|s| message.contains(s)))
    }

    /// A reason for a Kubernetes condition.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::NotFound | Error::Spawn { .. } => "HelmUnavailable",
            Error::Timeout { .. } => "HelmTimeout",
            Error::OutOfMemory { .. } => "HelmOutOfMemory",
            Error::OutOfCpu { .. } => "HelmOutOfCpu",
            Error::Crashed { .. } => "HelmCrashed",
            Error::Failed { .. } | Error::Output { .. } => "HelmFailed",
        }
    }
}

impl Error {
    /// Whether Helm stopped at rendering the chart: a template that does not parse, a failed
    /// `fail` or `required`, a function call that failed, or output that is not YAML.
    pub fn is_render_failure(&self) -> bool {
        const SIGNS: [&str; 4] = [
            "parse error at (",
            "execution error at (",
            "template: ",
            "YAML parse error on ",
        ];
        matches!(self, Error::Failed { message, .. } if SIGNS.iter().any(|s| message.contains(s)))
    }

    /// Whether Helm was refused reading its own release records, which it does before it
    /// renders or writes anything.
    pub fn is_records_forbidden(&self) -> bool {
        self.is_forbidden()
            && matches!(self, Error::Failed { message, .. } if message.contains("failed to query with labels"))
    }

    /// The error with Helm's own words replaced by where in the chart it stopped, for a call
    /// whose render could read the cluster (`lookup` in the chart, or templates in the values
    /// that the chart's `tpl` runs): its message could then carry what was read, such as a
    /// Secret, to whoever reads the composition. Classify the error first: the words are gone.
    pub fn withheld(self) -> Error {
        match self {
            Error::Failed { verb, message } => {
                let places = template_places(&message);
                let at = match places.is_empty() {
                    true => String::new(),
                    false => format!(" at {}", places.join(", ")),
                };
                Error::Failed {
                    verb,
                    message: format!(
                        "stopped{at}; Helm's own message is withheld, since this render could read the cluster (lookup in the chart, or templates in the values); unless the render itself failed, the controller's log has it"
                    ),
                }
            }
            other => other,
        }
    }

    /// Helm's answer for a release that does not exist (`release: not found`, also at the end of
    /// `uninstall: Release not loaded: NAME: release: not found`).
    pub(super) fn is_release_not_found(&self) -> bool {
        matches!(self, Error::Failed { message, .. } if message.ends_with("release: not found"))
    }
}

/// The chart files and lines a Helm message names (`chart/templates/x.yaml:5:4`), in order,
/// each once: where a render stopped, without what it was rendering.
fn template_places(message: &str) -> Vec<String> {
    let mut places = Vec::new();
    for token in message.split(|c: char| c.is_whitespace() || "()<>\"'`".contains(c)) {
        let token = token.trim_end_matches(':');
        let mut parts = token.splitn(2, ':');
        let (Some(file), Some(position)) = (parts.next(), parts.next()) else {
            continue;
        };
        let is_file = [".yaml", ".yml", ".tpl", ".txt", ".json"]
            .iter()
            .any(|ext| file.ends_with(ext))
            && file
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c));
        let is_position = position
            .split(':')
            .all(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        if is_file && is_position && !places.iter().any(|p| p == token) {
            places.push(token.to_string());
        }
    }
    places
}

/// Helm's stderr without Helm 4's log lines (`level=WARN msg=...`, which repeat the error) and
/// without its `Error: ` prefix, cut to [`MESSAGE_LIMIT`] bytes on a char boundary.
pub(super) fn shorten(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|line| !line.starts_with("level="))
        .collect();
    let stderr = match lines.iter().all(|line| line.trim().is_empty()) {
        true => stderr.to_string(),
        false => lines.join("\n"),
    };
    let message = stderr.trim().trim_start_matches("Error: ").trim();
    crate::api::shorten(message, MESSAGE_LIMIT)
}
