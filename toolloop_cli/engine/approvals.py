"""Approval gates answered by a person through the journal: a gated call without an
answer pauses its lane and the run (exit 4); ``toolloop approve`` answers it; ``resume`` runs it
with the approved arguments, once, or gives it a ``denied`` receipt."""

from __future__ import annotations

from typing import Any, Callable

from .._canonical import sha256_of


class Approvals:
    """The answers to one run's approval gates, read from and written to the journal. An answer
    is acted on only when its link in the run's hash chain holds: one edited in the database is
    ignored, with a warning (``warn``), and the call goes on waiting."""

    def __init__(self, store: Any, run_id: str, warn: Callable[[str], None] | None = None):
        self.store = store
        self.run_id = run_id
        self.warn = warn or (lambda _text: None)
        #: whether the last ``decide`` that answered "wait" started the wait (a new request, or one
        #: asked again), rather than finding the request still pending
        self.asked = False

    def decide(self, item_key: str | None, call_key: str, args: Any, args_sha256: str,
               redactor: Any = None) -> tuple[str, Any, str | None]:
        """``("run", args, by)``, ``("reject", message, by)``, ``("lost", message, by)`` or
        ``("wait", None, None)``; ``by`` is who answered. ``lost``: the approver typed a new value
        into a redacted field (``redactor`` says which fields are), which the journal never kept,
        so this answer cannot be acted on; it is used up, and the call asks again if run again."""
        self.asked = False
        row = self.store.approval(self.run_id, item_key, call_key)
        if row is None:
            self.store.request_approval(self.run_id, item_key, call_key, args_sha256)
            self.asked = True
            return "wait", None, None
        state = row["state"]
        by = row.get("approver") or "unknown"
        if state == "pending":
            return "wait", None, None
        if state in ("approved", "rejected") and not self._holds(row, item_key, call_key, args_sha256):
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
        self.asked = True
        return "wait", None, None

    def _holds(self, row: dict, item_key: str | None, call_key: str, args_sha256: str) -> bool:
        """Whether the answer in ``row`` may be acted on: its link in the chain holds. A request
        journaled before requests were links is asked again; one that does not match its link is
        left as it is, as evidence, and the call waits."""
        check = getattr(self.store, "link_holds", None)  # a store of an App's own may keep no chain
        if check is None or check(self.run_id, "approval", row.get("n")):
            return True
        where = f"call '{call_key}'" + (f" (lane '{item_key}')" if item_key else "")
        if row.get("n") is None:
            self.store.reopen_approval(self.run_id, item_key, call_key, args_sha256)
            self.warn(f"the answer to {where} of run {self.run_id} was journaled before answers were links of the"
                      " run's hash chain: it is asked again")
        else:
            self.warn(f"the answer to {where} of run {self.run_id} does not match its link in the run's hash chain"
                      f" (it was changed in the database): ignored, the call waits; see 'toolloop runs verify"
                      f" {self.run_id}'")
        return False

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

