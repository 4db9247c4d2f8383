"""Running in production: run labels and ``runs show --contract`` (the contract a run used)."""

from __future__ import annotations

import re
import sys
from typing import List, Optional

from .common import fail

#: a label key: letters, digits and ``_ . - /``, starting with a letter or digit
_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-/]{0,63}")
MAX_VALUE = 256

LABEL_HELP = "KEY=VALUE attached to the run (repeatable): in the summary, audit events and telemetry."


def parse_labels(given: Optional[List[str]], flag: str = "--label") -> dict[str, str]:
    """``KEY=VALUE`` pairs; a malformed one or a key given twice is a usage error (exit 2)."""
    from ..router._text import excerpt

    labels: dict[str, str] = {}
    for item in given or []:
        key, eq, value = item.partition("=")
        if not eq or not _KEY.fullmatch(key):
            fail(f"{flag} {excerpt(item)} is not KEY=VALUE", 2,
                 "a key is letters, digits and _ . - / (at most 64, starting with a letter or digit),"
                 " e.g. --label ticket=OPS-42")
        if len(value) > MAX_VALUE or any(ord(c) < 32 or ord(c) == 127 for c in value):
            fail(f"{flag} {excerpt(key)}: the value must be at most {MAX_VALUE} characters without control characters", 2)
        if key in labels and labels[key] != value:
            fail(f"{flag} {excerpt(key)} is given twice with different values", 2, "give each key once")
        labels[key] = value
    return labels


def print_contract(store: object, run: dict) -> None:
    """``runs show --contract``: the contract snapshot stored with the run, as JSON."""
    import json

    snapshot = store.contract_of(run["run_id"])  # type: ignore[attr-defined]
    if snapshot is None:
        fail(f"run {run['run_id']} has no contract snapshot: it was journaled by an older toolloop", 1,
             f"its contract hash is {run['contract_sha256']}")
    sys.stdout.write(json.dumps(snapshot, indent=2, ensure_ascii=False) + "\n")
