//! The step of a fetch that differs between a Helm repository and an OCI registry: what a
//! chart's published versions are and how one of them is downloaded. Everything around it
//! (choosing the version, the cache, verifying and reading the archive) is the one flow that
//! drives every source.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::version::VersionSpec;
use super::{Error, Limits};

/// Where one chart is published. A source talks to the network only; it never reads or writes
/// the cache.
pub(crate) trait Source {
    /// One published version as the source lists it (an index entry, a tag).
    type Entry: Clone + Serialize + DeserializeOwned;

    /// The cache key (after the reference) of the source's listing of versions.
    const LISTING_KEY: &'static str;

    /// Where the chart is, without credentials, as messages name it.
    fn location(&self) -> &str;

    /// The chart's name.
    fn name(&self) -> &str;

    /// The chart version an entry stands for.
    fn version_of(entry: &Self::Entry) -> String;

    /// The entry satisfying `spec` among `entries`.
    fn select<'e>(
        entries: &'e [Self::Entry],
        spec: &VersionSpec,
        requested: &str,
    ) -> Option<&'e Self::Entry>;

    /// The entry of the exact version `requested` when the source can look one up without
    /// listing every version; `None` means "list them".
    async fn lookup(&mut self, requested: &str) -> Result<Option<Self::Entry>, Error>;

    /// Every published version, read from the network.
    async fn list(&mut self, limits: Limits) -> Result<Vec<Self::Entry>, Error>;

    /// Downloads the archive of `entry`.
    async fn download(&mut self, entry: &Self::Entry, limits: Limits) -> Result<Download, Error>;
}

/// A downloaded chart archive, not yet verified.
pub(crate) struct Download {
    /// The archive.
    pub bytes: Vec<u8>,
    /// Where it came from, without credentials.
    pub url: String,
    /// The digest the source published for it, if any.
    pub expected_digest: Option<String>,
}

/// The client in `slot`, built on first use: a chart found in the cache needs none.
pub(crate) fn built<T>(
    slot: &mut Option<T>,
    build: impl FnOnce() -> Result<T, Error>,
) -> Result<&T, Error> {
    let client = match slot.take() {
        Some(client) => client,
        None => build()?,
    };
    Ok(slot.insert(client))
}
