"""Tools for the call-path hardening tests: results JSON cannot hold, arguments changed in place,
a write that outlives its timeout."""

from __future__ import annotations

import datetime
import time


def nan() -> dict:
    return {"x": float("nan")}


def infinity() -> list:
    return [float("inf")]


def a_date() -> dict:
    return {"when": datetime.date(2026, 1, 2)}


def big_int() -> dict:
    return {"n": 2**100}


def pop_password(creds: dict) -> dict:
    """Removes the password from the (nested) arguments it was given, and adds a field."""
    creds.pop("password", None)
    creds["touched"] = True
    return {"ok": True}


def slow_write(path: str, seconds: float) -> dict:
    time.sleep(seconds)
    with open(path, "a") as fh:
        fh.write("written\n")
    return {"path": path}
