//! The TCP backend: a kernel listening on loopback (the GUI add-on, `blender -b`, or the bpy
//! module), with a token, TCP_NODELAY, per-call deadlines, the contract's concurrency bound,
//! and reconnection with backoff for new calls.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::net::TcpStream;
use tokio::sync::RwLock;
use vibe_errors::Envelope;

use crate::connection::{Connection, HandshakeOptions};
use crate::error::{Cause, TransportError};
use crate::frame::{Hello, SessionConfig};
use crate::rng::SplitMix64;
use crate::transport::{Call, Transport};

/// The kernel's default TCP port. Not 9876: three other Blender bridges listen there with
/// incompatible framings.
pub const DEFAULT_PORT: u16 = 9833;

/// How to reach a kernel over TCP.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TcpOptions {
    /// The kernel's address (loopback by default).
    pub addr: SocketAddr,
    /// How long one connection attempt may take.
    pub connect_timeout: Duration,
    /// Handshake settings, including the token.
    pub handshake: HandshakeOptions,
    /// How many times a new call may reconnect a dropped connection (0 disables reconnection).
    pub reconnect_attempts: u32,
    /// The first backoff delay; it doubles per attempt, with jitter, up to `backoff_max`.
    pub backoff_base: Duration,
    /// The longest backoff delay.
    pub backoff_max: Duration,
    /// When a reconnect finds another instance of the same Blender (it restarted): `false`
    /// (the default) leaves the session lost, every call failing with
    /// [`TransportError::KernelRestarted`]; `true` starts a fresh session on it (the last
    /// `configure` is sent again). Either way the call that finds the restart fails with
    /// `KernelRestarted`, so the bridge clears what it knew of the old scene.
    pub adopt_restarted: bool,
}

impl TcpOptions {
    /// Defaults for `addr`: 2 s to connect, 5 s for the hello, 5 reconnect attempts from
    /// 50 ms up to 2 s apart.
    pub fn new(addr: SocketAddr) -> TcpOptions {
        TcpOptions {
            addr,
            connect_timeout: Duration::from_secs(2),
            handshake: HandshakeOptions::default(),
            reconnect_attempts: 5,
            backoff_base: Duration::from_millis(50),
            backoff_max: Duration::from_secs(2),
            adopt_restarted: false,
        }
    }

    /// How long a caller polls for an answer before sleeping
    /// ([`HandshakeOptions::busy_poll`]; zero turns it off).
    pub fn busy_poll(mut self, window: Duration) -> TcpOptions {
        self.handshake.busy_poll = window;
        self
    }

    /// With a token.
    pub fn with_token(mut self, token: impl Into<String>) -> TcpOptions {
        self.handshake.token = Some(token.into());
        self
    }

    /// Starts a fresh session on a Blender that restarted (see [`TcpOptions::adopt_restarted`]).
    pub fn adopting_restarts(mut self) -> TcpOptions {
        self.adopt_restarted = true;
        self
    }
}

/// A [`Transport`] to a kernel over TCP.
pub struct TcpTransport {
    options: TcpOptions,
    hello: Hello,
    /// The kernel instance the session runs on (a new one after an adopted restart).
    instance: Mutex<Option<String>>,
    connection: RwLock<Arc<Connection>>,
    session: Mutex<Option<SessionConfig>>,
}

impl std::fmt::Debug for TcpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpTransport")
            .field("addr", &self.options.addr)
            .field("hello", &self.hello)
            .finish_non_exhaustive()
    }
}

async fn open(options: &TcpOptions) -> Result<Connection, TransportError> {
    let stream = tokio::time::timeout(options.connect_timeout, TcpStream::connect(options.addr))
        .await
        .map_err(|_| {
            TransportError::Connect(
                format!(
                    "no connection to {} within {:?}",
                    options.addr, options.connect_timeout
                )
                .into(),
            )
        })?
        .map_err(|e| TransportError::Connect(Cause::io(options.addr, e)))?;
    stream
        .set_nodelay(true)
        .map_err(|e| TransportError::Connect(e.into()))?;
    let (reader, writer) = stream.into_split();
    Connection::establish(reader, writer, options.handshake.clone()).await
}

impl TcpTransport {
    /// Connects and runs the handshake.
    pub async fn connect(options: TcpOptions) -> Result<TcpTransport, TransportError> {
        let connection = open(&options).await?;
        let hello = connection.hello().clone();
        Ok(TcpTransport {
            options,
            instance: Mutex::new(hello.instance.clone()),
            hello,
            connection: RwLock::new(Arc::new(connection)),
            session: Mutex::new(None),
        })
    }

    /// The live connection, reconnecting (with backoff, within `deadline`) if it dropped.
    async fn current(&self, deadline: Duration) -> Result<Arc<Connection>, TransportError> {
        let connection = Arc::clone(&*self.connection.read().await);
        match connection.closed() {
            None => return Ok(connection),
            Some(TransportError::ConnectionLost(_)) if self.options.reconnect_attempts > 0 => {}
            Some(error) => return Err(error),
        }
        let mut slot = self.connection.write().await;
        if slot.closed().is_none() {
            return Ok(Arc::clone(&slot));
        }
        let reconnect = async {
            let mut delay = self.options.backoff_base;
            let mut jitter = SplitMix64(jitter_seed());
            let mut last = TransportError::Connect("no attempt made".into());
            for _ in 0..self.options.reconnect_attempts {
                match open(&self.options).await {
                    Ok(fresh) => {
                        if fresh.hello().blender != self.hello.blender {
                            return Err(Restart::from(TransportError::Closed(
                                "the kernel came back as another Blender; start a new session"
                                    .into(),
                            )));
                        }
                        let known = self
                            .instance
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .clone();
                        if fresh.hello().instance != known {
                            let name =
                                |i: &Option<String>| i.clone().unwrap_or_else(|| "unknown".into());
                            return Err(Restart {
                                error: TransportError::KernelRestarted {
                                    old: name(&known),
                                    new: name(&fresh.hello().instance),
                                },
                                fresh: Some(fresh),
                            });
                        }
                        return Ok(fresh);
                    }
                    Err(error) => last = error,
                }
                let spread = delay.as_millis() as u64 / 2 + 1;
                tokio::time::sleep(delay + Duration::from_millis(jitter.next_u64() % spread)).await;
                delay = (delay * 2).min(self.options.backoff_max);
            }
            Err(Restart::from(last))
        };
        let fresh = match tokio::time::timeout(deadline, reconnect).await {
            Err(_) => return Err(TransportError::Deadline(deadline)),
            Ok(Ok(fresh)) => fresh,
            Ok(Err(Restart { error, fresh })) => {
                if let (true, Some(fresh)) = (self.options.adopt_restarted, fresh) {
                    // A fresh session on the restarted Blender, for the calls after this one.
                    let fresh = Arc::new(fresh);
                    self.configure_on(&fresh, deadline).await?;
                    *self.instance.lock().unwrap_or_else(|e| e.into_inner()) =
                        fresh.hello().instance.clone();
                    *slot = fresh;
                }
                return Err(error);
            }
        };
        let fresh = Arc::new(fresh);
        self.configure_on(&fresh, deadline).await?;
        *slot = Arc::clone(&fresh);
        Ok(fresh)
    }

    /// Sends the last `configure`, if any, on a new connection.
    async fn configure_on(
        &self,
        fresh: &Connection,
        deadline: Duration,
    ) -> Result<(), TransportError> {
        let session = self
            .session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(session) = session {
            fresh.configure_within(&session, deadline).await?;
        }
        Ok(())
    }
}

/// A seed for the reconnect backoff's jitter: the clock, so that bridges started together do not
/// retry in step.
fn jitter_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.as_nanos() as u64)
}

/// Why a reconnect failed: the error, and the connection to a restarted Blender, if that is
/// what it found.
struct Restart {
    error: TransportError,
    fresh: Option<Connection>,
}

impl From<TransportError> for Restart {
    fn from(error: TransportError) -> Restart {
        Restart { error, fresh: None }
    }
}

#[async_trait]
impl Transport for TcpTransport {
    fn hello(&self) -> &Hello {
        &self.hello
    }

    async fn configure(&self, session: &SessionConfig) -> Result<Envelope, TransportError> {
        let deadline = session.call_deadline();
        let connection = self.current(deadline).await?;
        let answer = connection.configure_within(session, deadline).await?;
        *self.session.lock().unwrap_or_else(|e| e.into_inner()) = Some(session.clone());
        Ok(answer)
    }

    async fn call(&self, call: Call) -> Result<Envelope, TransportError> {
        let connection = tokio::select! {
            biased;
            // Cancelled while a dropped connection is re-established: never sent.
            () = call.cancel.cancelled() => return Err(TransportError::CancelledUnsent),
            connection = self.current(call.deadline) => connection?,
        };
        connection.call(call).await
    }

    async fn call_batch(&self, calls: Vec<Call>) -> Vec<Result<Envelope, TransportError>> {
        let longest = calls.iter().map(|c| c.deadline).max().unwrap_or_default();
        match self.current(longest).await {
            Ok(connection) => connection.call_batch(calls).await,
            Err(error) => vec![Err(error); calls.len()],
        }
    }

    async fn close(&self) -> Result<(), TransportError> {
        self.connection.read().await.close().await
    }
}
