//! The file sink: append-only JSONL that resumes its chain on open, recovers a torn tail,
//! flushes by the chosen durability, and rotates by size.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::AuditError;
use crate::record::{GENESIS, hash_matches, split_line};
use crate::sink::AuditSink;

/// How hard the file sink works to make records survive a crash.
///
/// Measured costs are in the crate docs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// Buffered in the process; written out when a batch ends (the non-blocking writer ends a
    /// batch whenever its queue runs empty) and on flush. A crash loses the current batch.
    #[default]
    FlushPerBatch,
    /// Every record is handed to the operating system at once. A process crash loses nothing;
    /// a power loss may.
    FlushPerRecord,
    /// Like `FlushPerBatch`, plus `fsync` at the end of every batch: survives a power loss.
    FsyncPerBatch,
}

/// File sink settings.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct FileOptions {
    /// Durability.
    pub durability: Durability,
    /// Rotate before a record would take the file past this many bytes (none: never).
    pub rotate_bytes: Option<u64>,
    /// The longest record line the tail scan accepts on open.
    pub max_line_bytes: usize,
}

impl Default for FileOptions {
    fn default() -> Self {
        FileOptions {
            durability: Durability::FlushPerBatch,
            rotate_bytes: None,
            max_line_bytes: 64 * 1024 * 1024,
        }
    }
}

/// Where the chain stands: the last record's sequence number and hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainHead {
    /// The last sequence number (0 for an empty log).
    pub seq: u64,
    /// The last hash ([`GENESIS`] for an empty log).
    pub hash: String,
}

impl ChainHead {
    /// The head of an empty log.
    pub fn genesis() -> ChainHead {
        ChainHead {
            seq: 0,
            hash: GENESIS.to_owned(),
        }
    }
}

/// A torn tail found and cut off on open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// How many bytes were cut.
    pub torn_bytes: u64,
    /// blake3 of the cut bytes.
    pub torn_hash: String,
    /// Where the cut bytes were kept.
    pub saved_to: PathBuf,
}

/// Appends to a JSONL file.
#[derive(Debug)]
pub struct FileSink {
    /// Held for the sink's life: one writer per log (see [`FileSink::open`]).
    _lock: File,
    path: PathBuf,
    writer: BufWriter<File>,
    size: u64,
    options: FileOptions,
    rotations: u64,
}

/// Reads the last complete line of a file from its end, without reading the whole file.
/// Returns the line's start offset, and the bytes after the last newline (a torn tail).
fn read_tail(
    file: &mut File,
    len: u64,
    max_line: usize,
) -> Result<(u64, Vec<u8>, Vec<u8>), AuditError> {
    const CHUNK: u64 = 64 * 1024;
    let mut buffer: Vec<u8> = Vec::new();
    let mut start = len;
    loop {
        let take = CHUNK.min(start);
        start -= take;
        let mut chunk = vec![0u8; take as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut chunk)?;
        chunk.extend_from_slice(&buffer);
        buffer = chunk;
        // Wanted: the last newline (end of the last complete line) and the one before it.
        let last_nl = memchr::memrchr(b'\n', &buffer);
        if let Some(end) = last_nl {
            let before = memchr::memrchr(b'\n', &buffer[..end]);
            if before.is_some() || start == 0 {
                let line_start = before.map_or(0, |b| b + 1);
                let line = buffer[line_start..end].to_vec();
                let torn = buffer[end + 1..].to_vec();
                return Ok((start + line_start as u64, line, torn));
            }
        } else if start == 0 {
            // No newline at all: the whole file is a torn first record.
            return Ok((0, Vec::new(), buffer));
        }
        if buffer.len() > max_line + CHUNK as usize {
            return Err(AuditError::Corrupt {
                line: 0,
                reason: format!("no record boundary in the last {} bytes", buffer.len()),
            });
        }
        if start == 0 {
            return Ok((0, Vec::new(), buffer));
        }
    }
}

impl FileSink {
    /// Opens (or creates) `path` for appending and finds where its chain stands.
    ///
    /// A torn last line (a crash mid-append) is cut off, kept in `<path>.torn-<seq>`, and
    /// reported as a [`Recovery`] so the log can record it: no earlier record is lost and the
    /// chain does not fork. A last complete line whose hash does not match is refused
    /// ([`AuditError::Corrupt`]): appending after it would bless a tampered log.
    ///
    /// One writer per log: an exclusive lock on `<path>.lock` (a file that rotation never
    /// moves) is taken first and held while the sink lives; a second writer, in this process or
    /// another, gets [`AuditError::Locked`] instead of forking the chain.
    pub fn open(
        path: impl AsRef<Path>,
        options: FileOptions,
    ) -> Result<(FileSink, ChainHead, Option<Recovery>), AuditError> {
        let path = path.as_ref().to_path_buf();
        let lock_path = PathBuf::from(format!("{}.lock", path.display()));
        let lock = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(AuditError::Locked {
                    path: path.display().to_string(),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(AuditError::Io(e)),
        }
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)?;
        let len = file.metadata()?.len();
        let mut head = ChainHead::genesis();
        let mut recovery = None;
        let mut size = len;
        if len > 0 {
            let (line_start, line, torn) = read_tail(&mut file, len, options.max_line_bytes)?;
            if !line.is_empty() {
                let parts = split_line(&line).map_err(|e| AuditError::Corrupt {
                    line: 0,
                    reason: format!("last record is malformed: {e:?}"),
                })?;
                if !hash_matches(&parts) {
                    return Err(AuditError::Corrupt {
                        line: 0,
                        reason: format!("last record (seq {}) does not match its hash", parts.seq),
                    });
                }
                head = ChainHead {
                    seq: parts.seq,
                    hash: parts.hash.to_owned(),
                };
            }
            if !torn.is_empty() {
                let keep = if line.is_empty() {
                    line_start
                } else {
                    line_start + line.len() as u64 + 1
                };
                let saved_to = PathBuf::from(format!("{}.torn-{}", path.display(), head.seq + 1));
                std::fs::write(&saved_to, &torn)?;
                file.set_len(keep)?;
                file.sync_all()?;
                size = keep;
                recovery = Some(Recovery {
                    torn_bytes: torn.len() as u64,
                    torn_hash: format!("blake3:{}", blake3::hash(&torn).to_hex()),
                    saved_to,
                });
            }
        }
        let rotations = count_rotations(&path);
        Ok((
            FileSink {
                _lock: lock,
                path,
                writer: BufWriter::with_capacity(256 * 1024, file),
                size,
                options,
                rotations,
            },
            head,
            recovery,
        ))
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The name a rotated file gets: `vibe_audit.jsonl` -> `vibe_audit.jsonl.1`, `.2`, ...
    pub fn rotated_name(path: &Path, n: u64) -> PathBuf {
        PathBuf::from(format!("{}.{n}", path.display()))
    }
}

fn count_rotations(path: &Path) -> u64 {
    (1..)
        .take_while(|n| FileSink::rotated_name(path, *n).exists())
        .count() as u64
}

impl AuditSink for FileSink {
    fn write_line(&mut self, line: &[u8]) -> io::Result<()> {
        self.writer.write_all(line)?;
        self.size += line.len() as u64;
        if self.options.durability == Durability::FlushPerRecord {
            self.writer.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.writer.flush()?;
        if self.options.durability == Durability::FsyncPerBatch {
            self.writer.get_ref().sync_data()?;
        }
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.writer.flush()?;
        self.writer.get_ref().sync_data()
    }

    fn rotate_due(&self, next_len: usize) -> bool {
        self.options
            .rotate_bytes
            .is_some_and(|max| self.size > 0 && self.size + next_len as u64 > max)
    }

    fn rotate(&mut self) -> io::Result<Option<String>> {
        self.writer.flush()?;
        self.writer.get_ref().sync_all()?;
        self.rotations += 1;
        let rotated = FileSink::rotated_name(&self.path, self.rotations);
        std::fs::rename(&self.path, &rotated)?;
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&self.path)?;
        self.writer = BufWriter::with_capacity(256 * 1024, file);
        self.size = 0;
        Ok(Some(rotated.display().to_string()))
    }
}
