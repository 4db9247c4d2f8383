"""Approval gates fail closed: an expression that cannot be evaluated gates the call, and says why."""

from __future__ import annotations

import pytest

pytest.importorskip("celpy")

from toolloop_cli.contract.approval import ApprovalGate, RequiredGate  # noqa: E402


def test_a_gate_that_cannot_be_evaluated_gates_and_explains():
    gate = ApprovalGate("args.amount > 200")
    assert gate.matches({"amount": 500}, "write") and not gate.matches({"amount": 5}, "write")
    assert gate.explain({"amount": 5}, "write") is None
    assert gate.matches({"other": 1}, "write")  # a missing field: gated
    assert "could not be evaluated" in gate.explain({"other": 1}, "write")
    assert gate.matches({"amount": "lots"}, "write")  # a type error: gated


def test_required_gates_every_call():
    assert RequiredGate().matches({}, "read")
