"""The transaction tools: begin, commit, rollback (a file snapshot headless, Blender's undo
history in the GUI; see snapshot.py)."""

from . import lock, snapshot
from .envelope import Refusal, invalid
from .tools import opt_str, scene, tool


def tx_misuse(rule, message, **details):
    return Refusal("contract_violation", message, rule=rule, **details)


@tool("transaction.begin", keeps_structure=True)
def tx_begin(k, params):
    label = opt_str(params, "label")
    if k.state.transaction is not None:
        raise tx_misuse("transaction_open", "transaction %s is open; transactions do not nest"
                        % k.state.transaction[0], transaction=k.state.transaction[0])
    tx_id = "tx-%d" % (k.state.transactions_started + 1)
    # Headless: a snapshot of the whole file. GUI: a mark in Blender's undo history (snapshot.py).
    kept = snapshot.begin(k, tx_id, label)
    k.state.transactions_started += 1
    k.state.transaction = (tx_id, kept)
    k.shared.transaction_record = lock.record_by_name(k.shared)
    return {"transaction": tx_id}


def take_transaction(k, action):
    """Closes this session's transaction: its (id, what it kept), and the modifier record as it
    was at its begin (what a rollback restores)."""
    if k.state.transaction is None:
        raise tx_misuse("no_transaction", "%s without an open transaction" % action)
    tx, record = k.state.transaction, k.shared.transaction_record
    k.state.transaction = None
    k.shared.transaction_record = None
    return tx, record


@tool("transaction.commit", keeps_structure=True)
def tx_commit(k, params):
    (tx_id, kept), _ = take_transaction(k, "commit")
    snapshot.discard(kept)
    return {"transaction": tx_id, "committed": True}


@tool("transaction.rollback")
def tx_rollback(k, params):
    force = params.get("force", False)
    if not isinstance(force, bool):
        raise invalid("force", "`force` must be a boolean")
    if k.state.transaction is not None:
        # Refused (human edits, a history too short) with the transaction still open.
        snapshot.roll_back(k, k.state.transaction[1], force)
    (tx_id, kept), record = take_transaction(k, "rollback")
    snapshot.discard(kept)
    lock.restore_record(k.shared, record)
    # Identities change with the reload or undo; names are what the session knows objects by.
    k.state.identity.clear()
    k.state.seen = {o.name: lock.stable_id(o) for o in scene().objects if o.name in k.state.seen}
    return {"transaction": tx_id, "rolled_back": True}
