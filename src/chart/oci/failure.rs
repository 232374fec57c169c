//! What went wrong in a registry call, classified before it becomes an [`Error`]: a missing
//! tag and a missing repository mean different things to the caller.

use std::io;

use oci_client::errors::{OciDistributionError, OciErrorCode};

use crate::chart::Error;
use crate::chart::reference::scrub;

/// Why a registry call failed, before it is turned into an [`Error`].
#[derive(Debug)]
pub(super) enum OciFailure {
    /// The repository, tag or blob does not exist.
    NotFound,
    /// The registry refused the credentials (or their absence).
    Unauthorized(String),
    /// A blob's content does not match its digest: the actual digest.
    Digest(String),
    /// A blob is larger than the limit.
    TooLarge,
    /// Anything else: the registry is unreachable or answered nonsense.
    Other(String),
}

impl OciFailure {
    /// Classifies an oci-client error.
    pub(super) fn from_client(err: OciDistributionError) -> Self {
        use OciDistributionError as E;
        match err {
            E::AuthenticationFailure(detail) => OciFailure::Unauthorized(detail),
            E::UnauthorizedError { .. } => OciFailure::Unauthorized("HTTP 401 Unauthorized".into()),
            E::ImageManifestNotFoundError(_) => OciFailure::NotFound,
            E::RegistryError { envelope, .. } => {
                let codes: Vec<&OciErrorCode> = envelope.errors.iter().map(|e| &e.code).collect();
                if codes
                    .iter()
                    .any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied))
                {
                    OciFailure::Unauthorized(envelope.to_string())
                } else if codes.iter().any(|c| {
                    matches!(
                        c,
                        OciErrorCode::NameUnknown
                            | OciErrorCode::ManifestUnknown
                            | OciErrorCode::NotFound
                            | OciErrorCode::BlobUnknown
                    )
                }) {
                    OciFailure::NotFound
                } else {
                    OciFailure::Other(envelope.to_string())
                }
            }
            E::ServerError { code, message, .. } => match code {
                401 | 403 => OciFailure::Unauthorized(format!("HTTP {code}")),
                404 => OciFailure::NotFound,
                _ => OciFailure::Other(format!("HTTP {code}: {message}")),
            },
            E::DigestError(oci_client::errors::DigestError::VerificationError {
                actual, ..
            }) => OciFailure::Digest(actual),
            E::RequestError(e) => OciFailure::Other(describe_request(&e)),
            E::IoError(e) if e.kind() == io::ErrorKind::FileTooLarge => OciFailure::TooLarge,
            other => OciFailure::Other(other.to_string()),
        }
    }

    /// The error of a failure at `location`, with `secrets` scrubbed from its detail; a missing
    /// chart or version is `not_found()`.
    pub(super) fn into_error(
        self,
        location: &str,
        secrets: &[String],
        not_found: &dyn Fn() -> Error,
    ) -> Error {
        let clean = |text: String| scrub(&text, secrets);
        match self {
            OciFailure::NotFound => not_found(),
            OciFailure::Unauthorized(detail) => Error::AuthenticationFailed {
                url: location.to_string(),
                detail: clean(detail),
            },
            OciFailure::Digest(actual) => Error::DigestMismatch {
                url: location.to_string(),
                version: String::new(),
                expected: String::new(),
                actual,
            },
            OciFailure::TooLarge => Error::too_large(location.to_string(), "too large"),
            OciFailure::Other(detail) => Error::RepositoryUnreachable {
                url: location.to_string(),
                detail: clean(detail),
            },
        }
    }
}

/// A reqwest error from inside oci-client, without the URL and with its causes.
fn describe_request(err: &reqwest::Error) -> String {
    let mut out = if err.is_connect() {
        "cannot connect".to_string()
    } else if err.is_timeout() {
        "timed out".to_string()
    } else {
        "request failed".to_string()
    };
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}
