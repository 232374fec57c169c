//! The on-disk chart cache.
//!
//! - `blobs/sha256/<hex>.tgz`: chart archives, content-addressed by their SHA-256 and verified
//!   on every read, evicted least-recently-used beyond a size bound.
//! - `refs/<key>.json`: which blob a (url, repo, exact version) resolved to. An exact version is
//!   immutable, so a ref is trusted as long as its blob exists.
//! - `listings/<key>.json`: a chart's available versions (index entries or OCI tags), re-read
//!   at most once per poll interval so a range does not hit the repository on every resync.
//!
//! Keys are hashes of the URL, the chart name, the version and the credentials' identity: a
//! definition without credentials (or with other ones) never finds, through the cache, a chart
//! that another definition downloaded with credentials. The credential part is hashed with a
//! random salt kept in the cache directory (`salt`, mode 0600), so the cache survives restarts
//! and its file names say nothing about a password without the salt. A cache directory the
//! process creates is private to it (mode 0700); one it is given (a volume the kubelet mounted,
//! owned by root with the pod's fsGroup) is used as it is: a process may not chmod what it does
//! not own.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::Error;
use super::reference::ChartRef;

/// Default size bound of the blobs.
pub const DEFAULT_MAX_BYTES: u64 = 1024 * 1024 * 1024;
/// Default time a version listing is trusted.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(300);

/// A chart cache rooted at a directory.
#[derive(Debug)]
pub struct Cache {
    root: PathBuf,
    max_bytes: u64,
    poll_interval: Duration,
    salt: [u8; 32],
}

/// What an exact (url, repo, version) resolved to.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub(crate) struct CachedRef {
    /// The chart version.
    pub version: String,
    /// The URL the archive was downloaded from (without credentials).
    pub url: String,
    /// `sha256:<hex>` of the archive.
    pub digest: String,
}

/// A chart's available versions at some time.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub(crate) struct Listing<T> {
    /// Seconds since the epoch when the listing was read.
    fetched_at: u64,
    /// The versions (index entries or tags).
    pub items: T,
}

impl Cache {
    /// A cache in `root` (created if missing) bounded to `max_bytes` of archives, re-reading
    /// version listings at most every `poll_interval`.
    pub fn new(
        root: impl Into<PathBuf>,
        max_bytes: u64,
        poll_interval: Duration,
    ) -> Result<Self, Error> {
        let root = root.into();
        if create_root(&root)? {
            private(&root, 0o700)?;
        }
        for dir in ["blobs/sha256", "refs", "listings", "tmp"] {
            let path = root.join(dir);
            std::fs::create_dir_all(&path).map_err(|e| Error::io(&path, e))?;
        }
        let salt = load_or_create_salt(&root)?;
        Ok(Cache {
            root,
            max_bytes,
            poll_interval,
            salt,
        })
    }

    /// A cache in `root` with the default bounds.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self, Error> {
        Self::new(root, DEFAULT_MAX_BYTES, DEFAULT_POLL_INTERVAL)
    }

    /// The cache directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// How long a version listing is trusted.
    pub fn poll_interval(&self) -> Duration {
        self.poll_interval
    }

    /// The key of (reference, `version`): URL, chart name, version, credentials.
    pub(crate) fn key(&self, chart: &ChartRef, version: &str) -> String {
        let mut hasher = Sha256::new();
        for part in [
            chart.url.trim_end_matches('/'),
            chart.repo().unwrap_or(""),
            version,
        ] {
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part.as_bytes());
        }
        if chart.credentials.is_some() || !chart.secrets().is_empty() {
            let mut identity = Sha256::new();
            identity.update(self.salt);
            identity.update(format!("{:?}", chart.credentials).as_bytes());
            for secret in chart.secrets() {
                identity.update((secret.len() as u64).to_be_bytes());
                identity.update(secret.as_bytes());
            }
            hasher.update(identity.finalize());
        }
        hex::encode(hasher.finalize())
    }

    /// The verified archive with `digest` (`sha256:<hex>`), if cached. A blob whose content no
    /// longer matches its name is deleted.
    pub(crate) fn blob(&self, digest: &str) -> Option<(PathBuf, Vec<u8>)> {
        let path = self.blob_path(digest)?;
        let bytes = std::fs::read(&path).ok()?;
        if sha256_digest(&bytes) != digest {
            let _ = std::fs::remove_file(&path);
            return None;
        }
        touch(&path);
        Some((path, bytes))
    }

    /// Stores an archive under its digest and returns `(digest, path)`; then evicts old blobs
    /// if the cache is over its bound.
    pub(crate) fn put_blob(&self, bytes: &[u8]) -> Result<(String, PathBuf), Error> {
        let digest = sha256_digest(bytes);
        let path = self
            .blob_path(&digest)
            .ok_or_else(|| Error::io(&self.root, std::io::Error::other("bad digest")))?;
        if !path.exists() {
            self.write_atomic(&path, bytes)?;
        }
        self.evict(&path);
        Ok((digest, path))
    }

    /// The cached resolution of `key`, if any.
    pub(crate) fn get_ref(&self, key: &str) -> Option<CachedRef> {
        let bytes = std::fs::read(self.root.join("refs").join(format!("{key}.json"))).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Records the resolution of `key`.
    pub(crate) fn put_ref(&self, key: &str, value: &CachedRef) -> Result<(), Error> {
        let path = self.root.join("refs").join(format!("{key}.json"));
        let bytes = serde_json::to_vec(value).map_err(|e| Error::io(&path, e.into()))?;
        self.write_atomic(&path, &bytes)
    }

    /// The listing of `key`, if it was read less than a poll interval ago.
    pub(crate) fn fresh_listing<T: for<'de> Deserialize<'de>>(&self, key: &str) -> Option<T> {
        let bytes = std::fs::read(self.root.join("listings").join(format!("{key}.json"))).ok()?;
        let listing: Listing<T> = serde_json::from_slice(&bytes).ok()?;
        let age = now().checked_sub(listing.fetched_at)?;
        (age < self.poll_interval.as_secs().max(1)).then_some(listing.items)
    }

    /// Records a listing read now.
    pub(crate) fn put_listing<T: Serialize>(&self, key: &str, items: T) -> Result<(), Error> {
        let path = self.root.join("listings").join(format!("{key}.json"));
        let listing = Listing {
            fetched_at: now(),
            items,
        };
        let bytes = serde_json::to_vec(&listing).map_err(|e| Error::io(&path, e.into()))?;
        self.write_atomic(&path, &bytes)
    }

    fn blob_path(&self, digest: &str) -> Option<PathBuf> {
        let hex = digest.strip_prefix("sha256:")?;
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        Some(
            self.root
                .join("blobs/sha256")
                .join(format!("{}.tgz", hex.to_ascii_lowercase())),
        )
    }

    /// Writes through a temporary file and a rename, so readers never see a partial file.
    fn write_atomic(&self, path: &Path, bytes: &[u8]) -> Result<(), Error> {
        let tmp_dir = self.root.join("tmp");
        let mut tmp =
            tempfile::NamedTempFile::new_in(&tmp_dir).map_err(|e| Error::io(&tmp_dir, e))?;
        tmp.write_all(bytes).map_err(|e| Error::io(tmp.path(), e))?;
        tmp.persist(path).map_err(|e| Error::io(path, e.error))?;
        Ok(())
    }

    /// Deletes least-recently-used blobs until the total is within the bound; `keep` (the blob
    /// just written) is never deleted.
    fn evict(&self, keep: &Path) {
        let dir = self.root.join("blobs/sha256");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return;
        };
        let mut blobs: Vec<(SystemTime, u64, PathBuf)> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let meta = e.metadata().ok()?;
                Some((meta.modified().ok()?, meta.len(), e.path()))
            })
            .collect();
        let mut total: u64 = blobs.iter().map(|(_, len, _)| len).sum();
        blobs.sort();
        for (_, len, path) in blobs {
            if total <= self.max_bytes {
                break;
            }
            if path == keep {
                continue;
            }
            if std::fs::remove_file(&path).is_ok() {
                tracing::debug!(path = %path.display(), "evicted a cached chart");
                total = total.saturating_sub(len);
            }
        }
    }
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Marks a blob as used now, for eviction order.
fn touch(path: &Path) {
    if let Ok(file) = std::fs::File::options().append(true).open(path) {
        let _ = file.set_modified(SystemTime::now());
    }
}

/// Creates the cache's root (and its parents); true when this call created it, false when it was
/// there already.
fn create_root(root: &Path) -> Result<bool, Error> {
    if let Some(parent) = root.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    match std::fs::create_dir(root) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && root.is_dir() => Ok(false),
        Err(e) => Err(Error::io(root, e)),
    }
}

/// Restricts a path to its owner (Unix).
fn private(path: &Path, mode: u32) -> Result<(), Error> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .map_err(|e| Error::io(path, e))?;
    }
    #[cfg(not(unix))]
    let _ = (path, mode);
    Ok(())
}

/// The cache's salt: read from `<root>/salt`, or made and written there (first writer wins).
fn load_or_create_salt(root: &Path) -> Result<[u8; 32], Error> {
    let path = root.join("salt");
    if let Ok(bytes) = std::fs::read(&path)
        && let Ok(salt) = <[u8; 32]>::try_from(bytes.as_slice())
    {
        return Ok(salt);
    }
    let salt = fresh_salt();
    let tmp_dir = root.join("tmp");
    let mut tmp = tempfile::NamedTempFile::new_in(&tmp_dir).map_err(|e| Error::io(&tmp_dir, e))?;
    tmp.write_all(&salt).map_err(|e| Error::io(tmp.path(), e))?;
    private(tmp.path(), 0o600)?;
    match tmp.persist_noclobber(&path) {
        Ok(_) => Ok(salt),
        // Another process made one meanwhile: use it.
        Err(_) => std::fs::read(&path)
            .map_err(|e| Error::io(&path, e))
            .and_then(|bytes| {
                <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| Error::Io {
                    path: path.display().to_string(),
                    detail: "the cache salt is not 32 bytes".to_string(),
                })
            }),
    }
}

/// 32 random bytes, from the operating system's hash seeds (no extra dependency).
fn fresh_salt() -> [u8; 32] {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = Sha256::new();
    for i in 0..8u64 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(i);
        hasher.update(h.finish().to_le_bytes());
    }
    hasher.update(std::process::id().to_le_bytes());
    hasher.update(format!("{:?}", SystemTime::now()).as_bytes());
    hasher.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_are_verified_and_evicted() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path(), 25, Duration::from_secs(60)).unwrap();
        let (d1, p1) = cache.put_blob(b"0123456789").unwrap();
        assert_eq!(cache.blob(&d1).unwrap().1, b"0123456789");
        std::thread::sleep(Duration::from_millis(20));
        let (d2, _) = cache.put_blob(b"abcdefghij").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        // Reading the first makes it the most recently used.
        assert!(cache.blob(&d1).is_some());
        std::thread::sleep(Duration::from_millis(20));
        let (d3, _) = cache.put_blob(b"ABCDEFGHIJ").unwrap();
        assert!(cache.blob(&d1).is_some());
        assert!(cache.blob(&d2).is_none(), "least recently used survived");
        assert!(cache.blob(&d3).is_some());

        std::fs::write(&p1, b"tampered!!").unwrap();
        assert!(cache.blob(&d1).is_none());
        assert!(!p1.exists());
        assert!(cache.blob("sha256:../../etc/passwd").is_none());
    }

    #[test]
    fn keys_separate_repo_version_and_credentials() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let base = ChartRef::new("https://example.org/charts/");
        let a = cache.key(&base.clone().with_repo("a"), "1.0.0");
        let b = cache.key(&base.clone().with_repo("b"), "1.0.0");
        let a2 = cache.key(&base.clone().with_repo("a"), "1.0.1");
        let a_auth = cache.key(
            &base.clone().with_repo("a").with_basic_auth("u", "pw1"),
            "1.0.0",
        );
        let a_auth2 = cache.key(
            &base.clone().with_repo("a").with_basic_auth("u", "pw2"),
            "1.0.0",
        );
        let a_slash = cache.key(
            &ChartRef::new("https://example.org/charts").with_repo("a"),
            "1.0.0",
        );
        assert_eq!(a, a_slash);
        let all = [&a, &b, &a2, &a_auth, &a_auth2];
        for (i, x) in all.iter().enumerate() {
            for y in &all[i + 1..] {
                assert_ne!(x, y);
            }
        }
    }

    #[test]
    fn keys_survive_a_restart_but_not_another_cache() {
        let dir = tempfile::tempdir().unwrap();
        let chart = ChartRef::new("https://example.org/charts")
            .with_repo("a")
            .with_basic_auth("u", "pw");
        let root = dir.path().join("cache");
        let first = Cache::open(&root).unwrap().key(&chart, "1.0.0");
        let again = Cache::open(&root).unwrap().key(&chart, "1.0.0");
        assert_eq!(first, again);
        let other_dir = tempfile::tempdir().unwrap();
        let other = Cache::open(other_dir.path()).unwrap().key(&chart, "1.0.0");
        assert_ne!(first, other);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&root), 0o700);
            assert_eq!(mode(&root.join("salt")), 0o600);
        }
    }

    /// A kubelet mounts an emptyDir owned by root with the pod's fsGroup (mode 2777) and the
    /// operator runs as another user: the directory is used as given, never chmodded.
    #[cfg(unix)]
    #[test]
    fn a_given_root_keeps_its_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o2777)).unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let mode = std::fs::metadata(cache.root())
            .unwrap()
            .permissions()
            .mode()
            & 0o7777;
        assert_eq!(mode, 0o2777);
        assert_eq!(
            std::fs::metadata(dir.path().join("salt"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o600
        );
    }

    #[test]
    fn listings_expire() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path(), DEFAULT_MAX_BYTES, Duration::from_secs(60)).unwrap();
        cache.put_listing("k", vec!["1.0.0".to_string()]).unwrap();
        assert_eq!(
            cache.fresh_listing::<Vec<String>>("k"),
            Some(vec!["1.0.0".to_string()])
        );
        let stale = Cache::new(dir.path(), DEFAULT_MAX_BYTES, Duration::ZERO).unwrap();
        // A zero interval still trusts a listing for the second it was read in.
        let path = dir.path().join("listings/k.json");
        std::fs::write(&path, br#"{"fetched_at":1,"items":["1.0.0"]}"#).unwrap();
        assert_eq!(stale.fresh_listing::<Vec<String>>("k"), None);
        assert_eq!(cache.fresh_listing::<Vec<String>>("k"), None);
    }
}
