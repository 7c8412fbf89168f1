//! Verifying a log: every record's hash, every link, every sequence number.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::file::ChainHead;
use crate::record::{MissingPart, hash_matches, split_line};

/// The first broken link of a log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Break {
    /// The file (for multi-file verification), empty for a single stream.
    pub file: String,
    /// 1-based line number within that file.
    pub line: u64,
    /// What is wrong.
    pub reason: String,
}

/// The result of a verification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// Records that verified before the first break (or in all).
    pub records: u64,
    /// The head after the last good record.
    pub head: ChainHead,
    /// The first break, if any.
    pub first_break: Option<Break>,
}

impl Report {
    /// Whether the whole log verified.
    pub fn is_intact(&self) -> bool {
        self.first_break.is_none()
    }
}

/// How many bytes the verifier reads at a time.
const READ_CHUNK: usize = 1 << 20;

/// Verifies a stream of records starting from `head` (genesis for a log's first file).
///
/// Lines are checked in place in a large read buffer: no per-line copy, no JSON parse.
pub fn verify_reader(
    mut reader: impl Read,
    head: ChainHead,
    file: &str,
) -> std::io::Result<Report> {
    let mut buffer: Vec<u8> = Vec::with_capacity(READ_CHUNK * 2);
    let mut head = head;
    let mut records = 0;
    let mut number = 0;
    let broken = |number: u64, reason: String| Break {
        file: file.to_owned(),
        line: number,
        reason,
    };
    loop {
        let filled = buffer.len();
        buffer.resize(filled + READ_CHUNK, 0);
        let read = reader.read(&mut buffer[filled..])?;
        buffer.truncate(filled + read);
        // Find the complete lines of this chunk, then hash them on every core: hashing is the
        // cost of verification, and records hash independently. Links are checked in order.
        let mut spans = Vec::new();
        let mut start = 0;
        while let Some(end) = memchr::memchr(b'\n', &buffer[start..]).map(|e| start + e) {
            spans.push((start, end));
            start = end + 1;
        }
        let checked = check_in_parallel(&buffer, &spans);
        for line in checked {
            number += 1;
            let line = match line {
                Ok(line) => line,
                Err(e) => {
                    return Ok(Report {
                        records,
                        head,
                        first_break: Some(broken(number, format!("malformed record: {e:?}"))),
                    });
                }
            };
            let reason = if !line.hash_ok {
                Some(format!(
                    "record seq {} does not match its hash: it was changed",
                    line.seq
                ))
            } else if &buffer[line.prev.clone()] != head.hash.as_bytes() {
                Some(format!(
                    "record seq {} does not link to the record before it: a record was removed, inserted or reordered",
                    line.seq
                ))
            } else if line.seq != head.seq + 1 {
                Some(format!("sequence jumps from {} to {}", head.seq, line.seq))
            } else {
                None
            };
            if let Some(reason) = reason {
                return Ok(Report {
                    records,
                    head,
                    first_break: Some(broken(number, reason)),
                });
            }
            head.seq = line.seq;
            head.hash.clear();
            head.hash
                .push_str(std::str::from_utf8(&buffer[line.hash.clone()]).unwrap_or_default());
            records += 1;
        }
        buffer.drain(..start);
        if read == 0 {
            if !buffer.is_empty() {
                return Ok(Report {
                    records,
                    head,
                    first_break: Some(broken(
                        number + 1,
                        "torn last line (no newline): an interrupted append".into(),
                    )),
                });
            }
            return Ok(Report {
                records,
                head,
                first_break: None,
            });
        }
    }
}

/// One line, split and hashed by a worker: where its parts are in the buffer.
struct Checked {
    seq: u64,
    prev: std::ops::Range<usize>,
    hash: std::ops::Range<usize>,
    hash_ok: bool,
}

fn check_line(buffer: &[u8], from: usize, to: usize) -> Result<Checked, MissingPart> {
    let line = &buffer[from..to];
    let parts = split_line(line)?;
    let offset = |part: &str| {
        let start = part.as_ptr() as usize - line.as_ptr() as usize + from;
        start..start + part.len()
    };
    Ok(Checked {
        seq: parts.seq,
        prev: offset(parts.prev),
        hash: offset(parts.hash),
        hash_ok: hash_matches(&parts),
    })
}

/// Splits and hashes every line on up to [`MAX_VERIFY_THREADS`] threads: hashing is the cost of
/// verification, and records hash independently. The links are checked in order afterwards.
fn check_in_parallel(buffer: &[u8], spans: &[(usize, usize)]) -> Vec<Result<Checked, MissingPart>> {
    let check = |&(from, to): &(usize, usize)| check_line(buffer, from, to);
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(MAX_VERIFY_THREADS);
    if threads < 2 || spans.len() < 256 {
        return spans.iter().map(check).collect();
    }
    let per = spans.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let workers: Vec<_> = spans
            .chunks(per)
            .map(|part| {
                (
                    part.len(),
                    scope.spawn(move || part.iter().map(check).collect::<Vec<_>>()),
                )
            })
            .collect();
        // A worker that died verified nothing: its lines count as broken, never as skipped.
        workers
            .into_iter()
            .flat_map(|(len, w)| {
                w.join()
                    .unwrap_or_else(|_| (0..len).map(|_| Err(MissingPart::Hash)).collect())
            })
            .collect()
    })
}

/// The most threads one verification uses.
pub const MAX_VERIFY_THREADS: usize = 8;

/// Verifies a log's files in order (rotated files first, oldest first, the live file last):
/// the chain must run through all of them.
pub fn verify_files(paths: &[impl AsRef<Path>]) -> std::io::Result<Report> {
    let mut head = ChainHead::genesis();
    let mut records = 0;
    for path in paths {
        let path = path.as_ref();
        let report = verify_reader(File::open(path)?, head, &path.display().to_string())?;
        records += report.records;
        if report.first_break.is_some() {
            return Ok(Report { records, ..report });
        }
        head = report.head;
    }
    Ok(Report {
        records,
        head,
        first_break: None,
    })
}

/// Verifies and also checks the log ends at `expected` (a head kept elsewhere): the chain
/// alone cannot tell that its last records were cut off.
pub fn verify_anchored(
    paths: &[impl AsRef<Path>],
    expected: &ChainHead,
) -> std::io::Result<Report> {
    let mut report = verify_files(paths)?;
    if report.first_break.is_none() && report.head != *expected {
        report.first_break = Some(Break {
            file: String::new(),
            line: report.records + 1,
            reason: format!(
                "the log ends at seq {} but the anchored head is seq {}: records are missing at the end",
                report.head.seq, expected.seq
            ),
        });
    }
    Ok(report)
}
