//! The bridge's store of scene files: what kernels wrote, taken in where no kernel can write.

use std::path::{Path, PathBuf};

use super::RESTORE_DEADLINE;

/// The largest scene file the bridge takes in from a kernel (8 GiB).
pub const MAX_SCENE_BYTES: u64 = 8 << 30;

/// A scene file a kernel saved, moved into the bridge's store where no kernel can write, and
/// checked by hash before use; removed when the last holder drops it.
pub(super) struct Stored {
    pub(super) path: PathBuf,
    pub(super) hash: blake3::Hash,
}

impl Drop for Stored {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Takes a scene file a kernel wrote (in a folder the kernel, and so agent code, can write)
/// into the bridge's store: no link is followed (`O_NOFOLLOW`), nothing but a regular file with
/// one link is read (a FIFO or device is refused without blocking, `O_NONBLOCK`), at most
/// [`MAX_SCENE_BYTES`], hashed while copied, on a blocking thread within [`RESTORE_DEADLINE`].
pub(super) async fn take_in(from: PathBuf, to: PathBuf) -> Result<blake3::Hash, String> {
    let work = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
        let source = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags.bits() as i32)
            .open(&from)
            .map_err(|e| format!("the scene file is not a plain file the kernel wrote: {e}"))?;
        let meta = source.metadata().map_err(|e| e.to_string())?;
        if !meta.is_file() || meta.nlink() != 1 {
            return Err("the scene file is not a plain file the kernel wrote".to_owned());
        }
        if meta.len() > MAX_SCENE_BYTES {
            return Err(format!(
                "the scene file has {} bytes, past the limit of {MAX_SCENE_BYTES}",
                meta.len()
            ));
        }
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&to)
            .map_err(|e| format!("checkpoint store: {e}"))?;
        let mut hasher = blake3::Hasher::new();
        let mut limited = source.take(MAX_SCENE_BYTES + 1);
        let mut buffer = vec![0u8; 1 << 16];
        let mut total = 0u64;
        loop {
            let n = limited.read(&mut buffer).map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            total += n as u64;
            hasher.update(&buffer[..n]);
            out.write_all(&buffer[..n]).map_err(|e| e.to_string())?;
        }
        if total > MAX_SCENE_BYTES {
            let _ = std::fs::remove_file(&to);
            return Err(format!("the scene file grew past {MAX_SCENE_BYTES} bytes"));
        }
        let _ = std::fs::remove_file(&from);
        Ok(hasher.finalize())
    });
    match tokio::time::timeout(RESTORE_DEADLINE, work).await {
        Ok(Ok(result)) => result,
        Ok(Err(e)) => Err(format!("the scene file could not be taken in: {e}")),
        Err(_) => Err("taking the scene file in did not finish in time".to_owned()),
    }
}

pub(super) fn hash_file(path: &Path) -> Result<blake3::Hash, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("checkpoint read: {e}"))?;
    let mut hasher = blake3::Hasher::new();
    hasher
        .update_reader(file)
        .map_err(|e| format!("checkpoint read: {e}"))?;
    Ok(hasher.finalize())
}
