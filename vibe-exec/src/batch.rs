//! Batched calls through the pipeline: each call of a batch goes through every stage on its own
//! (its own checks, envelope and audit records); the sends of a run of read-only calls are
//! gathered into one [`Transport::call_batch`](vibe_transport::Transport::call_batch), which a
//! stream transport carries as one frame that the kernel runs in one hop.
//!
//! Only reads are gathered: a read changes nothing a later call's checks depend on, so running
//! their checks before any of them is sent answers exactly as running them one by one would. A
//! mutating call of a batch runs alone, after the calls before it answered.

use std::sync::Mutex;

use tokio::sync::oneshot;
use vibe_errors::Envelope;
use vibe_transport::{Call, TransportError};

use crate::session::{Session, lock};

type Answer = Result<Envelope, TransportError>;

/// Where the sends of one run of batched calls wait until every call of the run has either
/// sent or ended before sending (refused by a stage); the last one sends them all.
#[derive(Debug)]
pub(crate) struct BatchWindow {
    state: Mutex<WindowState>,
}

#[derive(Debug)]
struct WindowState {
    /// Calls of the run that have neither sent nor left.
    outstanding: usize,
    queued: Vec<(Call, oneshot::Sender<Answer>)>,
}

impl BatchWindow {
    /// A window for `calls` calls.
    pub(crate) fn new(calls: usize) -> BatchWindow {
        BatchWindow {
            state: Mutex::new(WindowState {
                outstanding: calls,
                queued: Vec::new(),
            }),
        }
    }

    /// Queues one call's send and waits for its answer (sending the batch when it is the last).
    pub(crate) async fn send(&self, session: &Session, call: Call) -> Answer {
        let (sender, receiver) = oneshot::channel();
        let ready = {
            let mut state = lock(&self.state);
            state.queued.push((call, sender));
            state.outstanding -= 1;
            take_if_ready(&mut state)
        };
        if let Some(queued) = ready {
            flush(session, queued).await;
        }
        receiver.await.unwrap_or_else(|_| {
            Err(TransportError::Closed(
                "the batch ended before this call was answered".into(),
            ))
        })
    }

    /// A call of the run ended without sending (a stage refused it).
    pub(crate) async fn leave(&self, session: &Session) {
        let ready = {
            let mut state = lock(&self.state);
            state.outstanding -= 1;
            take_if_ready(&mut state)
        };
        if let Some(queued) = ready {
            flush(session, queued).await;
        }
    }
}

fn take_if_ready(state: &mut WindowState) -> Option<Vec<(Call, oneshot::Sender<Answer>)>> {
    (state.outstanding == 0 && !state.queued.is_empty()).then(|| std::mem::take(&mut state.queued))
}

async fn flush(session: &Session, queued: Vec<(Call, oneshot::Sender<Answer>)>) {
    let (calls, senders): (Vec<Call>, Vec<_>) = queued.into_iter().unzip();
    let answers = session.transport.call_batch(calls).await;
    for (sender, answer) in senders.into_iter().zip(answers) {
        let _ = sender.send(answer);
    }
}
