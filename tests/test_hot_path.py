"""What the per-call path builds more cheaply stays what it was: the call's identity made only when
asked for, and a receipt built through its own ``__init__`` still a frozen dataclass."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from toolloop_cli.engine.identity import (
    CallIdentity, current_call, current_identity, idempotency_key, reset_current, set_current, set_pending,
)
from toolloop_cli.receipts import Receipt


def test_a_pending_identity_is_the_identity_its_fields_make():
    token = set_pending("run-1", 7, "item", "ck", 2, {"team": "a"}, "rid")
    try:
        made = current_call()
    finally:
        reset_current(token)
    assert made == CallIdentity("run-1", 7, "item", "ck", 2, {"team": "a"}, idempotency_key("run-1", 7), "rid")
    assert made.idempotency_key.startswith("tl-") and len(made.idempotency_key) == 35
    assert current_identity() is None
    with pytest.raises(LookupError):
        current_call()


def test_a_set_identity_is_returned_as_it_was_set():
    ident = CallIdentity("r", 1, None, None, 1, {}, "tl-given", None)
    token = set_current(ident)
    try:
        assert current_call() is ident
    finally:
        reset_current(token)


FIELDS = dict(run_id="r", seq=1, completion_seq=1, subagent="b", tool="t", parallel_batch_id=None, item_key="k",
              call_key="0", parent_receipt_id=None, iteration=None, receipt_id="x", status="ok", abandoned=False,
              attempts=1, cache="off", args_sha256="s", args={"a": 1}, result={}, error=None, envelope=None,
              started_at="a", finished_at="b", duration_ms=0.5)


def test_a_receipt_is_still_a_frozen_dataclass_with_its_fields_in_order():
    names = [f.name for f in dataclasses.fields(Receipt)]
    assert list(inspect.signature(Receipt).parameters) == names
    by_keyword = Receipt(**FIELDS)
    by_position = Receipt(*FIELDS.values())
    assert by_keyword == by_position
    assert by_keyword.approval is None and by_keyword.taint is None  # the defaults
    assert [getattr(by_keyword, n) for n in FIELDS] == list(FIELDS.values())
    with pytest.raises(dataclasses.FrozenInstanceError):
        by_keyword.status = "error"  # type: ignore[misc]
    assert dataclasses.replace(by_keyword, status="error").status == "error"
    assert Receipt.from_record(by_keyword.as_record()) == by_keyword
    with pytest.raises(TypeError):
        Receipt(run_id="r")  # type: ignore[call-arg]


def test_a_built_receipt_is_of_its_own_class_and_its_record_keeps_the_documented_order():
    made = Receipt(**FIELDS)
    assert type(made) is Receipt and made.__class__ is Receipt
    assert dataclasses.is_dataclass(made) and isinstance(made, Receipt)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.seq = 2  # type: ignore[misc]
    rec = made.as_record()
    assert list(rec) == ["type", *(f.name for f in dataclasses.fields(Receipt))]
    assert rec == {"type": "receipt", **FIELDS, "approval": None, "child_run_id": None, "isolation": None,
                   "taint": None}
    rec["status"] = "error"  # each record is a dict of its own: changing one changes no other
    assert made.as_record()["status"] == "ok" and made.as_record() is not made.as_record()


def test_a_subclass_of_receipt_is_built_field_by_field_and_stays_frozen():
    class Kept(Receipt):
        __slots__ = ("note",)

    made = Kept(**FIELDS)
    assert type(made) is Kept and made == Kept(*FIELDS.values())
    assert [getattr(made, n) for n in FIELDS] == list(FIELDS.values())
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.status = "error"  # type: ignore[misc]
