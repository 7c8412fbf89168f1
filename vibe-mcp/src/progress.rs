//! Progress notifications for the long tools: those whose registry time class is not `quick`
//! (renders, file loads and saves), when the client's request carries a `progressToken`.
//!
//! Blender reports no fraction of a render, so the progress is honest about what is known: the
//! seconds the call has run, against its deadline as the total. One notification when the call
//! starts (0), one every [`PROGRESS_EVERY`] while it runs, and one when it answered (the
//! total, so the client's bar ends full). Each is larger than the one before, as MCP requires.

use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::Peer;
use tokio::time::Instant;
use vibe::contract::TimeClass;

/// How often a long call reports that it still runs.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// Whether calls of this time class report progress.
pub fn is_long(class: TimeClass) -> bool {
    class != TimeClass::Quick
}

/// The progress of one call, sent to the client that asked for it.
pub struct Progress {
    peer: Peer<RoleServer>,
    token: ProgressToken,
    tool: String,
    deadline: Duration,
    started: Instant,
    last: f64,
}

impl Progress {
    /// Progress of `tool` (deadline `deadline`) for the request's `token`.
    pub fn new(
        peer: Peer<RoleServer>,
        token: ProgressToken,
        tool: &str,
        deadline: Duration,
    ) -> Progress {
        Progress {
            peer,
            token,
            tool: tool.to_owned(),
            deadline,
            started: Instant::now(),
            last: -1.0,
        }
    }

    async fn send(&mut self, progress: f64, message: String) {
        // Never equal to or below the last one, even if the clock did not move.
        let progress = if progress > self.last {
            progress
        } else {
            self.last + 0.001
        };
        self.last = progress;
        let note = ProgressNotificationParam::new(self.token.clone(), progress)
            .with_total(self.total())
            .with_message(message);
        // A client that went away gets no progress; the call's answer tells the rest.
        let _ = self.peer.notify_progress(note).await;
    }

    fn total(&self) -> f64 {
        self.deadline.as_secs_f64()
    }

    fn elapsed(&self) -> f64 {
        (self.started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0
    }

    /// The call started.
    pub async fn start(&mut self) {
        let message = format!(
            "{} started (deadline {} s)",
            self.tool,
            self.deadline.as_secs()
        );
        self.send(0.0, message).await;
    }

    /// The call still runs.
    pub async fn tick(&mut self) {
        let elapsed = self.elapsed();
        let message = format!(
            "{} running for {:.0} s (deadline {} s)",
            self.tool,
            elapsed,
            self.deadline.as_secs()
        );
        self.send(elapsed.min(self.total()), message).await;
    }

    /// The call answered.
    pub async fn finish(&mut self) {
        let message = format!("{} answered after {:.1} s", self.tool, self.elapsed());
        self.send(self.total(), message).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_and_file_tools_are_long_edits_are_not() {
        assert!(is_long(TimeClass::Render));
        assert!(is_long(TimeClass::File));
        assert!(!is_long(TimeClass::Quick));
    }
}
