//! The fast retry loop of seed 003, and the retry manager for infrastructure failures.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::json;
use vibe_errors::{Envelope, ErrorBody, ErrorCode, FailureClass, Reason};

use super::classify::classify;
use super::extract::extract_code;
use super::history::{ExecutionHistory, ExecutionRecord};
use crate::pipeline::Pipeline;

/// Fast retries per iteration (seed 003).
pub const MAX_FAST_RETRIES: u32 = 3;

/// What the fixer is asked: the failed code, the error, and the prompt of seed 003.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FixRequest {
    /// The code that failed (empty when the output had no code).
    pub code: String,
    /// The sanitized error message.
    pub error: String,
    /// The prompt to send a model, as seed 003 words it.
    pub prompt: String,
    /// 1-based retry number.
    pub attempt: u32,
}

impl FixRequest {
    fn new(code: &str, error: &str, attempt: u32, format: bool) -> FixRequest {
        let prompt = if format {
            format!(
                "Your previous answer had no usable code.\n\nError:\n{error}\n\nReturn ONLY the Python code in a fenced ```python block.\nDo not explain, just provide the code."
            )
        } else {
            format!(
                "Your previous code failed to execute.\n\nError:\n{error}\n\nPlease fix the code. Return ONLY the corrected Python code in a fenced block.\nDo not explain, just provide the fixed code."
            )
        };
        FixRequest {
            code: code.to_owned(),
            error: error.to_owned(),
            prompt,
            attempt,
        }
    }
}

/// Whatever writes code: embedders plug in their model here.
#[async_trait]
pub trait CodeFixer: Send + Sync {
    /// The model's answer to a fix request (prose with a fenced block, ideally just the block).
    async fn fix(&self, request: &FixRequest) -> Result<String, String>;
}

/// The outcome of one iteration: the final code and answer, with the retries folded in.
#[derive(Clone, Debug, PartialEq)]
pub struct Iteration {
    /// The final code (the successful one, or the last attempt).
    pub code: String,
    /// The final answer.
    pub envelope: Envelope,
    /// How many fast retries were made.
    pub retry_count: u32,
    /// Short summaries of the errors met on the way.
    pub error_summaries: Vec<String>,
    /// The failure class of the final answer, if it failed.
    pub class: Option<FailureClass>,
}

/// The failure class of a `python.exec` answer: security and contract refusals are E0 (they
/// escalate, never fast-retry); timeouts are E0; otherwise the classifier decides from the
/// message, falling back to the envelope's own class.
pub fn failure_class(error: &ErrorBody) -> FailureClass {
    match error.code {
        ErrorCode::ContractViolation
        | ErrorCode::Timeout
        | ErrorCode::InternalError
        | ErrorCode::CapabilityMissing => FailureClass::E0,
        ErrorCode::InvalidArguments if error.reason() == Some(Reason::Syntax) => FailureClass::E2,
        _ => match classify(&error.message) {
            super::classify::ErrorKind::Unknown => error.class(),
            kind => kind.class(),
        },
    }
}

/// Runs model-written code through the pipeline, fixing trivial failures (E1 execution, E2
/// format) with the fixer up to [`MAX_FAST_RETRIES`] times. E0 escalates (see [`RetryManager`]),
/// E3 goes on to verification; neither is fast-retried.
#[derive(Debug, Clone, Copy)]
pub struct FastRetry {
    /// The retry limit.
    pub max_retries: u32,
}

impl Default for FastRetry {
    fn default() -> Self {
        FastRetry {
            max_retries: MAX_FAST_RETRIES,
        }
    }
}

impl FastRetry {
    /// One iteration for `request`, starting from the model's `output`; recorded in `history`.
    pub async fn run(
        &self,
        pipeline: &Pipeline,
        request: &str,
        output: &str,
        fixer: &dyn CodeFixer,
        history: Option<&ExecutionHistory>,
    ) -> Iteration {
        let started = Instant::now();
        // The agreed tool that runs agent code (the registry says which: it requires code_exec).
        let code_tool = pipeline
            .session()
            .agreement
            .tool_where(|t| {
                t.requires
                    .capabilities
                    .contains(vibe_contract::CAP_CODE_EXEC)
            })
            .map(str::to_owned);
        let mut summaries = Vec::new();
        let mut retries = 0;
        let mut output = output.to_owned();
        let mut code = String::new();
        let envelope = loop {
            let attempt = match extract_code(&output) {
                Ok(extracted) => {
                    code = extracted;
                    match &code_tool {
                        Some(tool) => pipeline.call(tool, json!({"code": code})).await,
                        None => Envelope::Err(
                            ErrorBody::new(
                                ErrorCode::CapabilityMissing,
                                "no tool that runs agent code was agreed (capability code_exec)",
                            )
                            .with_detail("capability", vibe_contract::CAP_CODE_EXEC),
                        ),
                    }
                }
                Err(format) => Envelope::Err(
                    ErrorBody::new(ErrorCode::InvalidArguments, format.to_string())
                        .with_reason(Reason::Format)
                        .with_detail("class", "E2"),
                ),
            };
            let Some(error) = attempt.error() else {
                break attempt;
            };
            let class = if error.reason() == Some(Reason::Format) {
                FailureClass::E2
            } else {
                failure_class(error)
            };
            if !class.fast_retry() || retries >= self.max_retries {
                break attempt;
            }
            summaries.push(format!("{class:?}: {}", error.message));
            retries += 1;
            let fix = FixRequest::new(
                &code,
                &error.message,
                retries,
                class == FailureClass::E2 && code.is_empty(),
            );
            match fixer.fix(&fix).await {
                Ok(next) => output = next,
                Err(why) => {
                    summaries.push(format!("fixer: {why}"));
                    break attempt;
                }
            }
        };
        let class = envelope.error().map(|e| {
            if e.reason() == Some(Reason::Format) {
                FailureClass::E2
            } else {
                failure_class(e)
            }
        });
        let envelope = if envelope.is_ok() {
            envelope.with_meta(vibe_errors::Meta {
                retry_count: Some(retries),
                ..Default::default()
            })
        } else {
            envelope
        };
        if let Some(history) = history {
            history.record(ExecutionRecord {
                id: 0,
                timestamp: vibe_audit::now_rfc3339(),
                request: request.to_owned(),
                code: code.clone(),
                envelope: envelope.to_value(),
                retry_count: retries,
                error_summaries: summaries.clone(),
                duration_ms: started.elapsed().as_secs_f64() * 1000.0,
                success: envelope.is_ok(),
            });
        }
        Iteration {
            code,
            envelope,
            retry_count: retries,
            error_summaries: summaries,
            class,
        }
    }
}

/// Retries infrastructure failures (E0) with exponential backoff and jitter, calling a restart
/// hook (reconnect, restart the worker) between attempts. Only retryable E0 failures are
/// retried: a security block or a halted session is final.
#[derive(Debug, Clone)]
pub struct RetryManager {
    /// Attempts in all (the first included).
    pub max_attempts: u32,
    /// The first delay; it doubles per attempt.
    pub base_delay: Duration,
    /// The longest delay.
    pub max_delay: Duration,
}

impl Default for RetryManager {
    fn default() -> Self {
        RetryManager {
            max_attempts: 4,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(5),
        }
    }
}

impl RetryManager {
    /// The delay before attempt `n` (1-based, n >= 2), with up to 50% jitter from `seed`.
    pub fn delay(&self, n: u32, seed: u64) -> Duration {
        let exp = self
            .base_delay
            .saturating_mul(1 << (n.saturating_sub(2)).min(16))
            .min(self.max_delay);
        // A multiplicative hash of the seed and the attempt: spread enough for jitter.
        let mixed = (seed ^ u64::from(n)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let jitter = (mixed >> 16) % (exp.as_millis() as u64 / 2 + 1);
        exp + Duration::from_millis(jitter)
    }

    /// Runs `operation` until it succeeds, fails with something other than a retryable E0, or
    /// runs out of attempts; `restart` runs before every retry.
    pub async fn run<Op, OpFut, Restart, RestartFut>(
        &self,
        mut operation: Op,
        mut restart: Restart,
    ) -> (Envelope, u32)
    where
        Op: FnMut() -> OpFut,
        OpFut: std::future::Future<Output = Envelope>,
        Restart: FnMut(u32) -> RestartFut,
        RestartFut: std::future::Future<Output = ()>,
    {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mut attempt = 1;
        loop {
            let envelope = operation().await;
            let retry = envelope
                .error()
                .is_some_and(|e| failure_class(e) == FailureClass::E0 && e.retryable());
            if !retry || attempt >= self.max_attempts {
                return (envelope, attempt);
            }
            attempt += 1;
            tokio::time::sleep(self.delay(attempt, seed)).await;
            restart(attempt).await;
        }
    }
}
