//! Reading a chart's files, from a `.tgz` or a directory, into memory with size limits.
//!
//! Nothing is ever written to disk here: an archive is read entry by entry into a map of
//! relative paths, and every entry that could escape the chart root (absolute paths, `..`,
//! links, device files) is refused before its content is read.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use flate2::read::GzDecoder;
use tar::EntryType;

use super::Error;

/// The files of one chart (not of its packed subcharts), by path relative to the chart root,
/// `/`-separated.
pub(crate) type Files = BTreeMap<String, Vec<u8>>;

/// Bounds on what reading a chart may cost. The defaults follow Helm's loader
/// (`MaxDecompressedChartSize` 100 MiB, `MaxDecompressedFileSize` 5 MiB).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest compressed archive accepted, in bytes (also the download limit).
    pub max_archive_size: u64,
    /// Largest total of decompressed file sizes, subcharts included, in bytes.
    pub max_total_size: u64,
    /// Largest single decompressed file, in bytes.
    pub max_file_size: u64,
    /// Most archive entries or directory entries, subcharts included.
    pub max_files: usize,
    /// Deepest nesting of subcharts.
    pub max_depth: usize,
    /// Largest repository `index.yaml` accepted, in bytes.
    pub max_index_size: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_archive_size: 50 * 1024 * 1024,
            max_total_size: 100 * 1024 * 1024,
            max_file_size: 5 * 1024 * 1024,
            max_files: 10_000,
            max_depth: 10,
            max_index_size: 100 * 1024 * 1024,
        }
    }
}

/// What is left of the limits while one chart and its subcharts are read.
#[derive(Debug)]
pub(crate) struct Budget {
    pub(crate) limits: Limits,
    total: u64,
    files: usize,
}

impl Budget {
    pub(crate) fn new(limits: Limits) -> Self {
        Budget {
            limits,
            total: 0,
            files: 0,
        }
    }

    fn count_entry(&mut self, chart: &str) -> Result<(), Error> {
        self.files += 1;
        if self.files > self.limits.max_files {
            return Err(Error::too_large(
                chart,
                format!("more than {} files", self.limits.max_files),
            ));
        }
        Ok(())
    }

    /// How many bytes the next file may have: the smaller of the per-file limit and what is left
    /// of the total.
    fn allowance(&self) -> u64 {
        self.limits
            .max_file_size
            .min(self.limits.max_total_size.saturating_sub(self.total))
    }

    fn spend(&mut self, chart: &str, file: &str, size: u64) -> Result<(), Error> {
        if size > self.limits.max_file_size {
            return Err(Error::too_large(
                chart,
                format!("{file} is larger than {} bytes", self.limits.max_file_size),
            ));
        }
        self.total += size;
        if self.total > self.limits.max_total_size {
            return Err(Error::too_large(
                chart,
                format!(
                    "more than {} bytes decompressed",
                    self.limits.max_total_size
                ),
            ));
        }
        Ok(())
    }
}

/// Reads a gzipped tar of a chart. Entries are expected under one top-level directory (the
/// chart name), which is stripped, as Helm does. `prefix` is prepended to file names in errors
/// (for subcharts).
pub(crate) fn read_archive(
    bytes: &[u8],
    chart: &str,
    prefix: &str,
    budget: &mut Budget,
) -> Result<Files, Error> {
    if bytes.len() as u64 > budget.limits.max_archive_size {
        return Err(Error::too_large(
            chart,
            format!(
                "{}archive is larger than {} bytes",
                prefix_label(prefix),
                budget.limits.max_archive_size
            ),
        ));
    }
    let archive_name = if prefix.is_empty() {
        "<archive>".to_string()
    } else {
        prefix.trim_end_matches(':').to_string()
    };
    let unreadable = |e: std::io::Error| Error::invalid(chart, &archive_name, e.to_string());

    let mut archive = tar::Archive::new(GzDecoder::new(bytes));
    let mut files = Files::new();
    for entry in archive.entries().map_err(unreadable)? {
        let mut entry = entry.map_err(|e| {
            Error::invalid(
                chart,
                &archive_name,
                format!("not a gzipped tar archive: {e}"),
            )
        })?;
        budget.count_entry(chart)?;
        let raw_name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let shown = format!("{prefix}{raw_name}");
        if !is_file(entry.header().entry_type(), chart, &shown)? {
            continue;
        }
        let name =
            chart_relative(&raw_name).map_err(|detail| Error::invalid(chart, &shown, detail))?;

        // The size after PAX extensions, which may exceed what the plain header can hold.
        let declared = entry.size();
        let content = read_entry(&mut entry, declared, chart, &shown, budget)?;
        files.insert(name, content);
    }
    if files.is_empty() {
        return Err(Error::invalid(
            chart,
            archive_name,
            "the archive holds no files",
        ));
    }
    Ok(files)
}

/// Whether an archive entry is a file to read (not a directory or header); an entry that could
/// escape the chart root or is not a file is refused.
fn is_file(kind: EntryType, chart: &str, shown: &str) -> Result<bool, Error> {
    match kind {
        EntryType::Regular | EntryType::Continuous => Ok(true),
        EntryType::Directory | EntryType::XGlobalHeader | EntryType::XHeader => Ok(false),
        EntryType::Symlink | EntryType::Link => Err(Error::invalid(
            chart,
            shown,
            "links are not allowed in a chart",
        )),
        EntryType::Char | EntryType::Block | EntryType::Fifo => Err(Error::invalid(
            chart,
            shown,
            "device files are not allowed in a chart",
        )),
        _ => Err(Error::invalid(
            chart,
            shown,
            format!(
                "unsupported archive entry type {:?}",
                kind.as_byte() as char
            ),
        )),
    }
}

/// The content of an archive entry, paid for from `budget`.
fn read_entry(
    entry: &mut impl Read,
    declared: u64,
    chart: &str,
    shown: &str,
    budget: &mut Budget,
) -> Result<Vec<u8>, Error> {
    let allowance = budget.allowance();
    if declared > allowance {
        budget.spend(chart, shown, declared)?;
    }
    // Never trust the header: read at most one byte more than allowed.
    let mut content = Vec::with_capacity(declared.min(allowance) as usize);
    entry
        .take(allowance.saturating_add(1))
        .read_to_end(&mut content)
        .map_err(|e| Error::invalid(chart, shown, e.to_string()))?;
    budget.spend(chart, shown, content.len() as u64)?;
    Ok(content)
}

fn prefix_label(prefix: &str) -> String {
    if prefix.is_empty() {
        String::new()
    } else {
        format!("{} ", prefix.trim_end_matches(':'))
    }
}

/// Maps an archive entry name to a path relative to the chart root, refusing anything that
/// could point outside it.
fn chart_relative(raw: &str) -> Result<String, String> {
    // Archives made on Windows may use `\`; treat both as separators, as Helm does.
    let normalized = raw.replace('\\', "/");
    if normalized.starts_with('/') {
        return Err("absolute paths are not allowed in a chart".to_string());
    }
    let mut parts = normalized.split('/').filter(|p| !p.is_empty() && *p != ".");
    let top = parts.next().ok_or_else(|| "empty file name".to_string())?;
    if top == ".." {
        return Err("paths outside the chart (`..`) are not allowed".to_string());
    }
    if is_drive(top) {
        return Err("absolute paths are not allowed in a chart".to_string());
    }
    let rest: Vec<&str> = parts.collect();
    if rest.is_empty() {
        return Err("file outside the chart's top-level directory".to_string());
    }
    if rest.contains(&"..") {
        return Err("paths outside the chart (`..`) are not allowed".to_string());
    }
    if rest.iter().any(|p| is_drive(p)) {
        return Err("absolute paths are not allowed in a chart".to_string());
    }
    Ok(rest.join("/"))
}

/// `C:` and the like: a Windows drive, which would make the path absolute there.
fn is_drive(part: &str) -> bool {
    let b = part.as_bytes();
    b.len() == 2 && b[0].is_ascii_alphabetic() && b[1] == b':'
}

/// Reads a chart directory. Symbolic links and special files are refused, like in archives.
pub(crate) fn read_dir(root: &Path, chart: &str, budget: &mut Budget) -> Result<Files, Error> {
    let mut files = Files::new();
    let mut pending = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, rel)) = pending.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&dir, e))?;
            budget.count_entry(chart)?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                return Err(Error::invalid(
                    chart,
                    format!("{rel}{}", entry.file_name().to_string_lossy()),
                    "file names must be UTF-8",
                ));
            };
            let shown = format!("{rel}{name}");
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).map_err(|e| Error::io(&path, e))?;
            let kind = meta.file_type();
            if kind.is_symlink() {
                return Err(Error::invalid(
                    chart,
                    shown,
                    "links are not allowed in a chart",
                ));
            } else if kind.is_dir() {
                pending.push((path, format!("{shown}/")));
            } else if kind.is_file() {
                budget.spend(chart, &shown, meta.len())?;
                let mut content = Vec::with_capacity(meta.len() as usize);
                std::fs::File::open(&path)
                    .and_then(|f| f.take(meta.len()).read_to_end(&mut content))
                    .map_err(|e| Error::io(&path, e))?;
                files.insert(shown, content);
            } else {
                return Err(Error::invalid(
                    chart,
                    shown,
                    "device files are not allowed in a chart",
                ));
            }
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_names_are_made_chart_relative() {
        assert_eq!(chart_relative("app/Chart.yaml").unwrap(), "Chart.yaml");
        assert_eq!(
            chart_relative("./app/templates/./x.yaml").unwrap(),
            "templates/x.yaml"
        );
        assert_eq!(
            chart_relative("app\\templates\\x.yaml").unwrap(),
            "templates/x.yaml"
        );
    }

    #[test]
    fn escaping_entry_names_are_refused() {
        for name in [
            "/etc/passwd",
            "\\etc\\passwd",
            "../evil",
            "app/../../evil",
            "app/templates/../../x",
            "c:/x/y",
            "app/c:/y",
            "Chart.yaml",
        ] {
            assert!(chart_relative(name).is_err(), "{name} was accepted");
        }
    }
}
