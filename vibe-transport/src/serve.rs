//! The kernel side of wire protocol v1 in Rust, serving a MockBlender over any byte stream.
//!
//! This is the "fake kernel" the TCP and stdio backends are tested against, and what the
//! `vibe-mock-kernel` binary runs. Calls are executed one at a time in arrival order, as
//! Blender's main thread does, and the mock's wire faults happen for real on the stream.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_util::codec::FramedRead;
use vibe_errors::{ErrorBody, Reason};

use crate::codec::{DEFAULT_MAX_FRAME_BYTES, LineCodec};
use crate::frame::Frame;
use crate::mock::{Fault, MockBlender};

/// How a served session behaves.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ServeOptions {
    /// The token a client must prove; none means no auth.
    pub token: Option<String>,
    /// Lines printed before the hello (as Blender prints its banner on stdout).
    pub banner: Vec<String>,
    /// How long the client has to send its auth frame.
    pub auth_deadline: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            token: None,
            banner: Vec::new(),
            auth_deadline: Duration::from_secs(5),
        }
    }
}

/// Whether two tokens are equal, in time independent of where they differ (blake3's hash
/// comparison is constant-time).
pub fn tokens_match(given: &str, expected: &str) -> bool {
    blake3::hash(given.as_bytes()) == blake3::hash(expected.as_bytes())
}

async fn send<W: AsyncWrite + Unpin>(writer: &mut W, frame: &Frame) -> std::io::Result<()> {
    writer.write_all(&frame.to_line()).await?;
    writer.flush().await
}

/// Serves one session on `reader` / `writer` until `bye`, end of stream, or a fault that drops
/// the connection.
pub async fn serve_mock<R, W>(
    reader: R,
    mut writer: W,
    mock: Arc<Mutex<MockBlender>>,
    options: ServeOptions,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    for line in &options.banner {
        writer.write_all(line.as_bytes()).await?;
        writer.write_all(b"\n").await?;
    }
    let mut hello = mock.lock().unwrap_or_else(|e| e.into_inner()).hello();
    hello.auth_required = options.token.is_some();
    send(&mut writer, &Frame::Hello(Box::new(hello))).await?;
    let mut frames = FramedRead::new(reader, LineCodec::new(DEFAULT_MAX_FRAME_BYTES));
    if let Some(expected) = &options.token {
        let first = tokio::time::timeout(options.auth_deadline, frames.next()).await;
        let proven = match first {
            Ok(Some(Ok(line))) => {
                matches!(Frame::parse(&line), Ok(Frame::Auth { token }) if tokens_match(&token, expected))
            }
            _ => false,
        };
        if !proven {
            let error = ErrorBody::from_reason(
                Reason::SecurityBlock,
                "authentication failed: a valid token is required before any call",
            );
            send(&mut writer, &Frame::Error { error }).await?;
            return Ok(());
        }
        send(&mut writer, &Frame::AuthOk).await?;
    }
    while let Some(line) = frames.next().await {
        let frame = match line
            .map_err(|e| e.to_string())
            .and_then(|l| Frame::parse(&l).map_err(|e| e.to_string()))
        {
            Ok(frame) => frame,
            Err(message) => {
                let error = ErrorBody::from_reason(
                    Reason::ContractViolation,
                    format!("malformed frame: {message}"),
                );
                send(&mut writer, &Frame::Error { error }).await?;
                return Ok(());
            }
        };
        match frame {
            Frame::Call {
                id, tool, params, ..
            } => {
                let outcome = mock
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .handle(&tool, &params);
                let Some(envelope) = outcome.envelope else {
                    continue;
                };
                let line = Frame::Result { id, envelope }.to_line();
                match outcome.wire_fault {
                    None => {
                        writer.write_all(&line).await?;
                        writer.flush().await?;
                    }
                    Some(Fault::Drop) => return Ok(()),
                    Some(Fault::Malformed) => {
                        writer.write_all(&line[..line.len() / 2]).await?;
                        writer.write_all(b"\n").await?;
                        writer.flush().await?;
                    }
                    Some(Fault::SlowDrip { bytes, every_ms }) => {
                        for chunk in line.chunks(bytes.max(1)) {
                            tokio::time::sleep(Duration::from_millis(every_ms)).await;
                            writer.write_all(chunk).await?;
                            writer.flush().await?;
                        }
                    }
                    Some(_) => {
                        writer.write_all(&line).await?;
                        writer.flush().await?;
                    }
                }
            }
            // The calls of a batch in order, their answers written together (a dropped
            // connection or a torn frame as the mock's fault plan says, at that call).
            Frame::Batch { calls } => {
                let mut out = Vec::new();
                for call in calls {
                    let outcome = mock
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .handle(&call.tool, &call.params);
                    let Some(envelope) = outcome.envelope else {
                        continue;
                    };
                    let line = Frame::Result {
                        id: call.id,
                        envelope,
                    }
                    .to_line();
                    match outcome.wire_fault {
                        Some(Fault::Drop) => {
                            writer.write_all(&out).await?;
                            writer.flush().await?;
                            return Ok(());
                        }
                        Some(Fault::Malformed) => {
                            out.extend_from_slice(&line[..line.len() / 2]);
                            out.push(b'\n');
                        }
                        _ => out.extend_from_slice(&line),
                    }
                }
                writer.write_all(&out).await?;
                writer.flush().await?;
            }
            Frame::Configure { id, session } => {
                let envelope = mock
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .configure(&session);
                send(&mut writer, &Frame::Result { id, envelope }).await?;
            }
            // Calls run to completion at once; there is nothing left to cancel.
            Frame::Cancel { .. } => {}
            Frame::Bye => return Ok(()),
            other => {
                let error = ErrorBody::from_reason(
                    Reason::ContractViolation,
                    format!("unexpected frame from the bridge: {}", other.kind()),
                );
                send(&mut writer, &Frame::Error { error }).await?;
                return Ok(());
            }
        }
    }
    Ok(())
}
