//! What a pack file declares, read as a stream (nothing is held whole).

use std::path::Path;

/// The largest size an object of `pack` declares it inflates to (for a
/// delta, its own instructions), read as a stream: nothing is held whole.
/// `None` when the file is not a readable pack.
pub fn largest_object(pack: &Path) -> Option<u64> {
    use gix::odb::pack::data::input::{BytesToEntriesIter, EntryDataMode, Mode};
    let file = std::fs::File::open(pack).ok()?;
    let entries = BytesToEntriesIter::new_from_header(
        std::io::BufReader::new(file),
        Mode::AsIs,
        EntryDataMode::Ignore,
        gix::hash::Kind::Sha1,
    )
    .ok()?;
    let mut largest = None;
    for entry in entries {
        match entry {
            Ok(e) => largest = largest.max(Some(e.decompressed_size)),
            // A pack cut short (a child ended mid-fetch): what was read counts.
            Err(_) => break,
        }
    }
    largest
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::process::Command;

    /// A pack of one blob of `size` zeros, as git writes it.
    fn pack_of_zeros(dir: &Path, size: usize) -> PathBuf {
        let git = |args: &[&str]| {
            let out = Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@t", "-C"])
                .arg(dir)
                .args(args)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        git(&["init", "-q"]);
        std::fs::write(dir.join("zeros"), vec![0u8; size]).unwrap();
        git(&["add", "zeros"]);
        git(&["commit", "-q", "-m", "zeros"]);
        git(&["repack", "-a", "-d", "-q"]);
        std::fs::read_dir(dir.join(".git/objects/pack"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "pack"))
            .unwrap()
    }

    #[test]
    fn the_largest_object_is_read_from_the_headers_without_holding_it() {
        let tmp = tempfile::tempdir().unwrap();
        let path = pack_of_zeros(tmp.path(), 5 * 1024 * 1024);
        assert!(std::fs::metadata(&path).unwrap().len() < 64 * 1024);
        assert_eq!(largest_object(&path), Some(5 * 1024 * 1024));
        let path = tmp.path().join("not.pack");
        std::fs::write(&path, b"not a pack").unwrap();
        assert_eq!(largest_object(&path), None);
    }
}
