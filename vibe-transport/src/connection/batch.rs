//! Batches: many calls in one `batch` frame, run in order on Blender's main thread in one hop,
//! each answered by its own `result` (protocol §5).

use std::time::Duration;

use futures::future::join_all;
use vibe_errors::Envelope;

use super::{Connection, InFlight, never_sent};
use crate::error::TransportError;
use crate::frame::{BatchedCall, Frame};
use crate::transport::{Call, Transport};

/// The most calls the bridge puts in one `batch` frame (the kernel's own bound, from its hello,
/// may be lower); longer batches go as several frames, back to back.
pub const MAX_BATCH_CALLS: usize = 256;

/// How long a kernel may hold a batch's brief answers to write them together (the kernel's
/// `ANSWER_GATHER_S`, PROTOCOL.md §5): a batch's caller polls this much longer for each answer
/// than a lone call's caller does, so that the gap between two bursts of answers does not put
/// it to sleep (and waking it cost more than the calls of a burst).
pub const BATCH_ANSWER_GATHER: Duration = Duration::from_millis(1);

type Answer = Result<Envelope, TransportError>;
type Receiver = tokio::sync::oneshot::Receiver<Answer>;

impl Connection {
    /// Runs `calls` in their order and answers each, in the same order. One frame carries them
    /// (several when there are more than the kernel takes at once, each taking one call slot):
    /// the kernel runs them one after another on its main thread without a hop between them.
    /// Each call keeps its own id, deadline (counted from the send), cancel and answer. A kernel
    /// that takes no batches (no `max_batch_calls` in its hello), a single call, or a batch
    /// whose frame would pass the kernel's frame size goes as pipelined calls instead.
    pub(crate) async fn run_batch(&self, calls: Vec<Call>) -> Vec<Answer> {
        let limit = self
            .hello
            .max_batch_calls
            .map_or(1, |n| (n as usize).clamp(1, MAX_BATCH_CALLS));
        if calls.len() <= 1 || limit == 1 {
            return self.pipelined(calls).await;
        }
        let mut chunks = Vec::new();
        let mut calls = calls.into_iter().peekable();
        while calls.peek().is_some() {
            chunks.push(calls.by_ref().take(limit).collect::<Vec<_>>());
        }
        join_all(chunks.into_iter().map(|chunk| self.one_batch(chunk)))
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    async fn pipelined(&self, calls: Vec<Call>) -> Vec<Answer> {
        join_all(calls.into_iter().map(|call| self.call(call))).await
    }

    async fn one_batch(&self, calls: Vec<Call>) -> Vec<Answer> {
        let count = calls.len();
        if let Some(error) = self.closed() {
            return vec![Err(never_sent(error)); count];
        }
        let start = tokio::time::Instant::now();
        let longest = calls.iter().map(|c| c.deadline).max().unwrap_or_default();
        let permit = match self.permit(longest).await {
            Ok(permit) => permit,
            Err(error) => return vec![Err(error); count],
        };
        let mut answers: Vec<Option<Answer>> = (0..count).map(|_| None).collect();
        let mut waiting = Vec::new(); // (position, id, receiver)
        let mut batched = Vec::new();
        for (position, call) in calls.iter().enumerate() {
            if call.cancel.is_cancelled() {
                // Cancelled before it left: not sent, not run.
                answers[position] = Some(Err(TransportError::CancelledUnsent));
                continue;
            }
            let (id, receiver) = self.register();
            waiting.push((position, id, receiver));
            batched.push(BatchedCall {
                id,
                tool: call.tool.clone(),
                params: call.params.clone(),
                deadline_ms: call.deadline.as_millis().min(u128::from(u64::MAX)) as u64,
            });
        }
        if batched.is_empty() {
            return answers.into_iter().map(answered).collect();
        }
        let line = Frame::Batch { calls: batched }.to_line();
        if line.len() as u64 > self.hello.max_frame_bytes {
            // Too big for one frame: the same calls, pipelined one by one.
            for (_, id, _) in &waiting {
                self.forget(*id);
            }
            drop(permit);
            let pipelined = self.pipelined(calls).await;
            return answers
                .into_iter()
                .zip(pipelined)
                .map(|(early, late)| early.unwrap_or(late))
                .collect();
        }
        let guards: Vec<InFlight<'_>> = waiting
            .iter()
            .map(|(_, id, _)| InFlight {
                id: *id,
                connection: self,
                armed: true,
            })
            .collect();
        if let Err(error) = self.send_line(line).await {
            // No complete frame left: none of the calls can have run.
            for mut guard in guards {
                guard.armed = false;
                self.forget(guard.id);
            }
            for (position, ..) in waiting {
                answers[position] = Some(Err(error.clone()));
            }
            return answers.into_iter().map(answered).collect();
        }
        let early = self.poll_batch_briefly(&mut waiting, &calls).await;
        let calls = &calls;
        let waits = waiting.into_iter().zip(guards).zip(early).map(
            |(((position, _, receiver), guard), early)| async move {
                let call = &calls[position];
                let answer = match early {
                    Some(answer) => self.settle(guard, answer),
                    None => {
                        self.wait(guard, receiver, start, call.deadline, &call.cancel)
                            .await
                    }
                };
                (position, answer)
            },
        );
        for (position, answer) in join_all(waits).await {
            answers[position] = Some(answer);
        }
        drop(permit);
        answers.into_iter().map(answered).collect()
    }
}

type Received = Result<Answer, tokio::sync::oneshot::error::RecvError>;

impl Connection {
    /// The answers that come while the batch's answers keep coming: each within
    /// [`busy_poll`](super::HandshakeOptions::busy_poll) plus [`BATCH_ANSWER_GATHER`] of the one
    /// before (a zero `busy_poll` turns this off), the task yielding instead of sleeping in
    /// between (as a lone call's wait does), so that a batch of quick calls is read without
    /// waking a sleeping CPU per burst of answers. Stops at a gap, a cancel, or the last answer;
    /// the calls left are waited for as usual.
    async fn poll_batch_briefly(
        &self,
        waiting: &mut [(usize, u64, Receiver)],
        calls: &[Call],
    ) -> Vec<Option<Received>> {
        let mut early: Vec<Option<Received>> = waiting.iter().map(|_| None).collect();
        let window = if self.busy_poll.is_zero() {
            self.busy_poll
        } else {
            self.busy_poll + BATCH_ANSWER_GATHER
        };
        // Answers come in order: each poll's window starts at the answer before.
        for ((position, _, receiver), slot) in waiting.iter_mut().zip(&mut early) {
            match self
                .poll_briefly(receiver, window, &calls[*position].cancel)
                .await
            {
                Some(answer) => *slot = Some(answer),
                None => break,
            }
        }
        early
    }
}

/// Every position of a batch is answered exactly once above; a hole would be a bug, answered
/// as an error rather than a panic.
fn answered(slot: Option<Answer>) -> Answer {
    slot.unwrap_or_else(|| {
        Err(TransportError::Protocol(
            "a call of the batch got no answer".into(),
        ))
    })
}
