"""Approval gates answered by a person through the journal (SPEC 6.4): a gated call without an
answer pauses its lane and the run (exit 4); ``toolloop approve`` answers it; ``resume`` runs it
with the approved arguments, once, or gives it a ``denied`` receipt."""

from __future__ import annotations

from typing import Any

from .._canonical import sha256_of


class Approvals:
    """The answers to one run's approval gates, read from and written to the journal."""

    def __init__(self, store: Any, run_id: str):
        self.store = store
        self.run_id = run_id

    def decide(self, item_key: str | None, call_key: str, args: Any, args_sha256: str,
               redactor: Any = None) -> tuple[str, Any, str | None]:
        """``("run", args, by)``, ``("reject", message, by)``, ``("lost", message, by)`` or
        ``("wait", None, None)``; ``by`` is who answered. ``lost``: the approver typed a new value
        into a redacted field (``redactor`` says which fields are), which the journal never kept,
        so this answer cannot be acted on; it is used up, and the call asks again if run again."""
        row = self.store.approval(self.run_id, item_key, call_key)
        if row is None:
            self.store.request_approval(self.run_id, item_key, call_key, args_sha256)
            return "wait", None, None
        state = row["state"]
        by = row.get("approver") or "unknown"
        if state == "pending":
            return "wait", None, None
        if state == "rejected":
            return "reject", row["message"] or "rejected by a person", by
        if state == "approved":
            if _withheld(row, redactor) and self.store.use_approval(self.run_id, item_key, call_key):
                return "lost", ("its approved arguments held a new value for a redacted field, which the journal"
                                " never stores, so this answer cannot run it; run it again with --retry-interrupted"
                                " and answer at a terminal"), by
            approved = row["args"] if row["args"] is not None else args
            # an approval is bound to the hash of the arguments it approved, and used once
            if sha256_of(approved) == row["args_sha256"] and self.store.use_approval(self.run_id, item_key, call_key):
                return "run", approved if row["args"] is None else kept_values(approved, args), by
        self.store.reopen_approval(self.run_id, item_key, call_key, args_sha256)
        return "wait", None, None

    def record(self, item_key: str | None, call_key: str, args_sha256: str, verdict: str, value: Any,
               by: str) -> None:
        """Journal an answer given at a terminal (used at once: the arguments are not kept)."""
        if verdict == "run":
            self.store.answer_approval(self.run_id, item_key, call_key, "used", args_sha256=sha256_of(value),
                                       **_approver(self.store, by))
        else:
            self.store.answer_approval(self.run_id, item_key, call_key, "rejected", message=value,
                                       **_approver(self.store, by))


def _withheld(row: dict, redactor: Any) -> bool:
    """Edited arguments stored with a marker where the approver typed a value: the stored form no
    longer hashes as what was approved."""
    edited = row.get("args")
    return (edited is not None and redactor is not None and redactor.marked(edited)
            and sha256_of(edited) != row["args_sha256"])


def kept_values(edited: Any, original: Any) -> Any:
    """Edited arguments with each ``"[REDACTED]"`` marker the approver kept replaced by the value
    the call had there (a person edits the redacted form of arguments, never the secret)."""
    from .redact import REDACTED

    if edited == REDACTED:
        return original
    if isinstance(edited, dict) and isinstance(original, dict):
        return {k: kept_values(v, original[k]) if k in original else v for k, v in edited.items()}
    if isinstance(edited, list) and isinstance(original, list):
        return [kept_values(v, original[i]) if i < len(original) else v for i, v in enumerate(edited)]
    return edited


def _approver(store: Any, by: str) -> dict:
    # stores that record who answered take ``approver``
    import inspect

    try:
        takes = "approver" in inspect.signature(store.answer_approval).parameters
    except (TypeError, ValueError):
        takes = False
    return {"approver": by} if takes else {}

