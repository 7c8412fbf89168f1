//! Macros: registry sequences run step by step through the full pipeline.
//!
//! * Every step is an ordinary call: validated, checked, guarded, audited.
//! * A failed step stops the rest. Its error is passed on with `details.context` naming the
//!   macro, the step and the tool.
//! * A macro that declares `rollback: transaction` runs inside its own transaction: on failure
//!   (a step, or a postcondition) it is rolled back and leaves no trace. It cannot run while a
//!   transaction is already open.
//! * A macro without rollback reports the steps that did apply in `details.partial_effects`.
//! * A mutating macro is refused up front in read-only mode, so it never half-runs.

use serde_json::{Map, Value, json};
use vibe_contract::{Condition, MacroSpec, RollbackMode, TransactionRole};
use vibe_errors::{Envelope, ErrorBody, ErrorCode, Meta, Reason};

use crate::pipeline::Pipeline;

fn macro_error(spec: &MacroSpec, message: String) -> ErrorBody {
    ErrorBody::new(ErrorCode::InvalidArguments, message)
        .with_context(json!({"macro": spec.macro_name}))
}

impl Pipeline {
    /// Runs an agreed macro with `inputs`; answers with one envelope.
    pub async fn run_macro(&self, name: &str, inputs: Value) -> Envelope {
        match self.macro_inner(name, inputs).await {
            Ok(envelope) | Err(envelope) => envelope,
        }
    }

    async fn macro_inner(&self, name: &str, inputs: Value) -> Result<Envelope, Envelope> {
        let agreement = &self.session().agreement;
        let spec = agreement
            .macros
            .as_ref()
            .and_then(|m| m.get(name))
            .cloned()
            .ok_or_else(|| {
                Envelope::Err(
                    ErrorBody::new(
                        ErrorCode::ContractViolation,
                        format!("macro {name:?} is not in the agreed macro registry"),
                    )
                    .with_rule(vibe_errors::Rule::MacroNotAgreed),
                )
            })?;
        let Value::Object(inputs) = inputs else {
            return Err(Envelope::Err(macro_error(
                &spec,
                "macro inputs must be a JSON object".into(),
            )));
        };
        if let Some(validator) = self.session().validators.get(&format!("macro:{name}"))
            && let Some(first) = validator.iter_errors(&Value::Object(inputs.clone())).next()
        {
            return Err(Envelope::Err(
                macro_error(&spec, crate::stages::clip(&format!("{name}: {first}")))
                    .with_reason(Reason::Schema),
            ));
        }
        let steps = spec.expand(&inputs);
        let mutates = steps
            .iter()
            .any(|(tool, _)| agreement.tools.get(tool).is_some_and(|t| t.mutates()));
        if mutates && self.session().is_read_only() {
            return Err(Envelope::Err(
                ErrorBody::from_reason(
                    Reason::ReadOnly,
                    format!("read-only mode: macro {name} changes the scene and is refused"),
                )
                .with_context(json!({"macro": name})),
            ));
        }
        let all_inputs = spec.with_defaults(&inputs);
        for condition in &spec.preconditions {
            let condition = condition.expand(&all_inputs);
            if !self.holds(&condition).await {
                return Err(Envelope::Err(
                    macro_error(&spec, format!("precondition failed: {condition:?}"))
                        .with_reason(Reason::Precondition),
                ));
            }
        }
        let transactional = spec.rollback == Some(RollbackMode::Transaction);
        if transactional {
            let begin = self
                .call_role(
                    TransactionRole::Begin,
                    json!({"label": format!("macro {name}")}),
                )
                .await;
            if let Envelope::Err(error) = begin {
                return Err(Envelope::Err(
                    error.with_context(json!({"macro": name, "step": "begin"})),
                ));
            }
        }
        let mut results = Vec::with_capacity(steps.len());
        for (i, (tool, args)) in steps.iter().enumerate() {
            match self.call(tool, Value::Object(args.clone())).await {
                Envelope::Ok(result) => {
                    results.push(json!({"step": i, "tool": tool, "result": result}))
                }
                Envelope::Err(error) => {
                    return Err(self
                        .fail(&spec, error, i, tool, &results, transactional)
                        .await);
                }
            }
        }
        for condition in &spec.postconditions {
            let condition = condition.expand(&all_inputs);
            if !self.holds(&condition).await {
                let error = ErrorBody::new(
                    ErrorCode::ExecutionFailed,
                    format!("postcondition failed: {condition:?}"),
                )
                .with_reason(Reason::Postcondition);
                return Err(self
                    .fail(
                        &spec,
                        error,
                        steps.len(),
                        "postcondition",
                        &results,
                        transactional,
                    )
                    .await);
            }
        }
        if transactional
            && let Envelope::Err(error) = self.call_role(TransactionRole::Commit, json!({})).await
        {
            return Err(Envelope::Err(
                error.with_context(json!({"macro": name, "step": "commit"})),
            ));
        }
        let meta = Meta {
            determinism: Some(spec.determinism),
            ..Meta::default()
        };
        Ok(Envelope::ok(
            json!({"macro": name, "version": spec.version.to_string(), "steps": results}),
        )
        .with_meta(meta))
    }

    async fn fail(
        &self,
        spec: &MacroSpec,
        error: ErrorBody,
        step: usize,
        tool: &str,
        done: &[Value],
        transactional: bool,
    ) -> Envelope {
        let mut context = Map::new();
        context.insert("macro".into(), json!(spec.macro_name));
        context.insert("step".into(), json!(step));
        context.insert("tool".into(), json!(tool));
        if transactional {
            let rollback = self.call_role(TransactionRole::Rollback, json!({})).await;
            context.insert("rolled_back".into(), json!(rollback.is_ok()));
            if let Some(e) = rollback.error() {
                context.insert("rollback_error".into(), json!(e.message));
            }
            return Envelope::Err(error.with_context(Value::Object(context)));
        }
        let applied: Vec<Value> = done
            .iter()
            .map(|r| json!({"step": r["step"], "tool": r["tool"]}))
            .collect();
        Envelope::Err(
            error
                .with_context(Value::Object(context))
                .with_detail("partial_effects", applied),
        )
    }

    /// Calls the agreed tool with transaction role `role` (the registry's `hints.transaction`).
    async fn call_role(&self, role: TransactionRole, params: Value) -> Envelope {
        let tool = self
            .session()
            .agreement
            .tool_where(|t| t.transaction_role() == Some(role))
            .map(str::to_owned);
        match tool {
            Some(tool) => self.call(&tool, params).await,
            None => Envelope::Err(
                ErrorBody::new(
                    ErrorCode::CapabilityMissing,
                    format!("no tool with the transaction role {role:?} was agreed (capability transactions)"),
                )
                .with_detail("capability", "transactions"),
            ),
        }
    }

    async fn holds(&self, condition: &Condition) -> bool {
        // Without an agreed lookup tool no condition can be seen to hold.
        let Some(lookup) = self.session().agreement.lookup_tool().map(str::to_owned) else {
            return false;
        };
        let info = |name: &str| self.call(&lookup, json!({"name": name}));
        match condition {
            Condition::ObjectExists(name) => info(name).await.is_ok(),
            Condition::ObjectAbsent(name) => info(name)
                .await
                .error()
                .is_some_and(|e| e.code == ErrorCode::NotFound),
            Condition::ObjectInCollection { object, collection } => info(object)
                .await
                .result()
                .and_then(|r| r["collections"].as_array().cloned())
                .is_some_and(|c| c.iter().any(|x| x == collection)),
        }
    }
}
