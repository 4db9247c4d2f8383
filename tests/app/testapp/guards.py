"""Guardrails for the routed-loop tests."""

from __future__ import annotations


def mask_secret(tool, status, value):
    if isinstance(value, dict) and "secret" in str(value):
        return {"action": "mask", "value": {"masked": True}}
    return None


def block_errors(tool, status, value):
    if status != "ok":
        return {"action": "block", "reason": "errors are not shown"}
    return None


def explode(tool, status, value):
    raise RuntimeError("guard bug")


def no_big_answers(answer):
    if answer.get("answer", 0) > 100:
        return {"action": "block", "reason": "too big"}
    return None
