//! The transaction tools: `transaction.begin`, `transaction.commit` and
//! `transaction.rollback`, one transaction at a time (the kernel's `transactions.py`).

use serde_json::{Value, json};
use vibe_errors::{ErrorBody, ErrorCode};

use super::{ToolResult, opt_str};
use crate::mock::{MockBlender, Transaction};

impl MockBlender {
    pub(super) fn tx_begin(&mut self, params: &Value) -> ToolResult {
        opt_str(params, "label")?;
        if let Some(open) = &self.transaction {
            return Err(ErrorBody::new(
                ErrorCode::ContractViolation,
                format!("transaction {} is open; transactions do not nest", open.id),
            )
            .with_rule(vibe_errors::Rule::TransactionOpen)
            .with_detail("transaction", open.id.as_str()));
        }
        self.transactions_started += 1;
        let id = format!("tx-{}", self.transactions_started);
        self.transaction = Some(Transaction {
            id: id.clone(),
            scene: self.scene.clone(),
            created: self.created.clone(),
            modifiers: self.modifiers.clone(),
        });
        Ok(json!({"transaction": id}))
    }

    fn no_transaction(action: &str) -> ErrorBody {
        ErrorBody::new(
            ErrorCode::ContractViolation,
            format!("{action} without an open transaction"),
        )
        .with_rule(vibe_errors::Rule::NoTransaction)
    }

    pub(super) fn tx_commit(&mut self) -> ToolResult {
        let tx = self
            .transaction
            .take()
            .ok_or_else(|| Self::no_transaction("commit"))?;
        Ok(json!({"transaction": tx.id, "committed": true}))
    }

    pub(super) fn tx_rollback(&mut self) -> ToolResult {
        let tx = self
            .transaction
            .take()
            .ok_or_else(|| Self::no_transaction("rollback"))?;
        self.restore_scene(tx.scene);
        self.created = tx.created;
        self.modifiers = tx.modifiers;
        Ok(json!({"transaction": tx.id, "rolled_back": true}))
    }
}
