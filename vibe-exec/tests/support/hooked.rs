//! One test transport over MockTransport, with hooks (closures) where each wrapping transport
//! would otherwise repeat the forwarding methods of the trait.

use std::path::PathBuf;

use async_trait::async_trait;
use futures::future::BoxFuture;
use vibe_errors::Envelope;
use vibe_transport::{Call, Hello, MockTransport, SessionConfig, Transport, TransportError};

/// What a call through a transport answers.
pub type Answer = Result<Envelope, TransportError>;

type CallHook<S> = Box<dyn for<'a> Fn(&'a Hooked<S>, Call) -> BoxFuture<'a, Answer> + Send + Sync>;
type BatchHook<S> =
    Box<dyn for<'a> Fn(&'a Hooked<S>, Vec<Call>) -> BoxFuture<'a, Vec<Answer>> + Send + Sync>;

/// MockTransport with hooks: a call (and a batch) goes to its hook when there is one, to the
/// mock otherwise; `hello` and the storage folders can be replaced. `state` is the hooks' own
/// (counters, a folder to keep), reached through the transport as if its fields were the
/// transport's (`transport.most`).
pub struct Hooked<S = ()> {
    /// The wrapped transport.
    pub inner: MockTransport,
    /// What the hooks keep.
    pub state: S,
    hello: Option<Hello>,
    storage: Vec<PathBuf>,
    on_call: Option<CallHook<S>>,
    on_batch: Option<BatchHook<S>>,
}

impl Hooked {
    /// `inner` with no hooks yet and no state.
    pub fn wrap(inner: MockTransport) -> Hooked {
        Hooked::with_state(inner, ())
    }
}

impl<S> Hooked<S> {
    /// `inner` with no hooks yet, keeping `state` for them.
    pub fn with_state(inner: MockTransport, state: S) -> Hooked<S> {
        Hooked {
            inner,
            state,
            hello: None,
            storage: Vec::new(),
            on_call: None,
            on_batch: None,
        }
    }

    /// Every call goes to `hook` (which calls `t.inner` to go on).
    pub fn on_call(
        mut self,
        hook: impl for<'a> Fn(&'a Hooked<S>, Call) -> BoxFuture<'a, Answer> + Send + Sync + 'static,
    ) -> Hooked<S> {
        self.on_call = Some(Box::new(hook));
        self
    }

    /// Every batch goes to `hook` (without one, a batch is its calls one after another).
    pub fn on_batch(
        mut self,
        hook: impl for<'a> Fn(&'a Hooked<S>, Vec<Call>) -> BoxFuture<'a, Vec<Answer>>
        + Send
        + Sync
        + 'static,
    ) -> Hooked<S> {
        self.on_batch = Some(Box::new(hook));
        self
    }

    /// Answers `hello` in place of the mock's.
    pub fn with_hello(mut self, hello: Hello) -> Hooked<S> {
        self.hello = Some(hello);
        self
    }

    /// Reports `folders` as the kernel's own storage.
    pub fn with_storage(mut self, folders: Vec<PathBuf>) -> Hooked<S> {
        self.storage = folders;
        self
    }
}

impl<S> std::ops::Deref for Hooked<S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.state
    }
}

#[async_trait]
impl<S: Send + Sync> Transport for Hooked<S> {
    fn hello(&self) -> &Hello {
        self.hello.as_ref().unwrap_or_else(|| self.inner.hello())
    }
    async fn configure(&self, session: &SessionConfig) -> Result<Envelope, TransportError> {
        self.inner.configure(session).await
    }
    async fn call(&self, call: Call) -> Answer {
        match &self.on_call {
            Some(hook) => hook(self, call).await,
            None => self.inner.call(call).await,
        }
    }
    async fn call_batch(&self, calls: Vec<Call>) -> Vec<Answer> {
        if let Some(hook) = &self.on_batch {
            return hook(self, calls).await;
        }
        let mut answers = Vec::with_capacity(calls.len());
        for call in calls {
            answers.push(self.call(call).await);
        }
        answers
    }
    async fn close(&self) -> Result<(), TransportError> {
        self.inner.close().await
    }
    fn storage_folders(&self) -> Vec<PathBuf> {
        self.storage.clone()
    }
}
