//! NDJSON framing as a tokio-util codec with a maximum frame length.
//!
//! The decoder remembers how far it has scanned, so a frame that arrives in many chunks is
//! scanned once, not once per chunk. A line longer than the maximum is an error as soon as the
//! buffered bytes exceed it, before the rest of the line is read: an oversized frame is never
//! allocated.

use bytes::{Buf, BufMut, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use crate::frame::Frame;

/// The default maximum frame size: 16 MiB (the contract's default payload limit).
pub const DEFAULT_MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// Errors of the line codec.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// A line exceeded the maximum frame size.
    #[error("frame exceeds the maximum of {max} bytes")]
    FrameTooLarge {
        /// The maximum.
        max: usize,
    },
    /// Reading or writing failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

/// Splits a byte stream into lines of at most `max_frame_bytes` bytes (newline excluded).
#[derive(Clone, Debug)]
pub struct LineCodec {
    max_frame_bytes: usize,
    /// How many bytes of the buffer are known to hold no newline.
    scanned: usize,
}

impl LineCodec {
    /// A codec with the given maximum frame size.
    pub fn new(max_frame_bytes: usize) -> LineCodec {
        LineCodec {
            max_frame_bytes,
            scanned: 0,
        }
    }

    /// The maximum frame size.
    pub fn max_frame_bytes(&self) -> usize {
        self.max_frame_bytes
    }
}

impl Default for LineCodec {
    fn default() -> Self {
        LineCodec::new(DEFAULT_MAX_FRAME_BYTES)
    }
}

impl Decoder for LineCodec {
    type Item = BytesMut;
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, CodecError> {
        match memchr_newline(&src[self.scanned..]) {
            Some(offset) => {
                let end = self.scanned + offset;
                self.scanned = 0;
                if end > self.max_frame_bytes {
                    return Err(CodecError::FrameTooLarge {
                        max: self.max_frame_bytes,
                    });
                }
                let mut line = src.split_to(end);
                src.advance(1);
                if line.last() == Some(&b'\r') {
                    line.truncate(line.len() - 1);
                }
                Ok(Some(line))
            }
            None => {
                self.scanned = src.len();
                if src.len() > self.max_frame_bytes {
                    return Err(CodecError::FrameTooLarge {
                        max: self.max_frame_bytes,
                    });
                }
                Ok(None)
            }
        }
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, CodecError> {
        match self.decode(src)? {
            Some(line) => Ok(Some(line)),
            // A final line without its newline is a torn frame; drop it rather than guess.
            None => {
                src.clear();
                self.scanned = 0;
                Ok(None)
            }
        }
    }
}

fn memchr_newline(bytes: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', bytes)
}

impl Encoder<&Frame> for LineCodec {
    type Error = CodecError;

    fn encode(&mut self, frame: &Frame, dst: &mut BytesMut) -> Result<(), CodecError> {
        let line = frame.to_line();
        if line.len() - 1 > self.max_frame_bytes {
            return Err(CodecError::FrameTooLarge {
                max: self.max_frame_bytes,
            });
        }
        dst.put_slice(&line);
        Ok(())
    }
}
