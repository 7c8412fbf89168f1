//! `details.rule`: which rule of a guard refused a call, as a typed vocabulary.

use std::fmt;

/// The rule a refusal names in `details.rule`, beside its reason. Open for forward
/// compatibility: a spelling this version does not know is kept verbatim as [`Rule::Other`]
/// (the code gate's own rules, for one, are named by its policy tables).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Rule {
    /// The tool is not in the session's agreement.
    ToolNotAgreed,
    /// The macro is not in the session's agreement.
    MacroNotAgreed,
    /// The arguments pass the contract's `max_payload_bytes`.
    MaxPayloadBytes,
    /// The session's files pass the contract's `temp_storage_mib`.
    TempStorageMib,
    /// Agent code without the code gate.
    NoCodeGate,
    /// A transaction is already open (transactions do not nest; a file cannot be opened in one).
    TransactionOpen,
    /// Another session holds the kernel's transaction.
    TransactionOfAnotherSession,
    /// A commit or rollback without an open transaction.
    NoTransaction,
    /// A write into a read-only project root.
    ProjectRoot,
    /// A rollback would also revert the person's own edits.
    HumanEdits,
    /// The undo history has no room for the transaction's steps.
    UndoHistoryFull,
    /// Blender's undo is not available to take the change back.
    UndoUnavailable,
    /// The actuator lock: removing what the agent did not create.
    Remove,
    /// The actuator lock: renaming what the agent did not create.
    Rename,
    /// The actuator lock: unlinking what the agent did not create.
    Unlink,
    /// A rule this version does not know; kept verbatim.
    Other(String),
}

impl Rule {
    /// The rules this version names, in declaration order.
    pub const KNOWN: [Rule; 15] = [
        Rule::ToolNotAgreed,
        Rule::MacroNotAgreed,
        Rule::MaxPayloadBytes,
        Rule::TempStorageMib,
        Rule::NoCodeGate,
        Rule::TransactionOpen,
        Rule::TransactionOfAnotherSession,
        Rule::NoTransaction,
        Rule::ProjectRoot,
        Rule::HumanEdits,
        Rule::UndoHistoryFull,
        Rule::UndoUnavailable,
        Rule::Remove,
        Rule::Rename,
        Rule::Unlink,
    ];

    /// The wire spelling.
    pub fn as_str(&self) -> &str {
        match self {
            Rule::ToolNotAgreed => "tool_not_agreed",
            Rule::MacroNotAgreed => "macro_not_agreed",
            Rule::MaxPayloadBytes => "max_payload_bytes",
            Rule::TempStorageMib => "temp_storage_mib",
            Rule::NoCodeGate => "no_code_gate",
            Rule::TransactionOpen => "transaction_open",
            Rule::TransactionOfAnotherSession => "transaction_of_another_session",
            Rule::NoTransaction => "no_transaction",
            Rule::ProjectRoot => "project_root",
            Rule::HumanEdits => "human_edits",
            Rule::UndoHistoryFull => "undo_history_full",
            Rule::UndoUnavailable => "undo_unavailable",
            Rule::Remove => "remove",
            Rule::Rename => "rename",
            Rule::Unlink => "unlink",
            Rule::Other(rule) => rule,
        }
    }

    /// Parses a wire spelling; never fails, unknown spellings become [`Rule::Other`].
    pub fn parse(rule: &str) -> Rule {
        Rule::KNOWN
            .into_iter()
            .find(|known| known.as_str() == rule)
            .unwrap_or_else(|| Rule::Other(rule.to_owned()))
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
