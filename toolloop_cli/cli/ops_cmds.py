"""Running in production: run labels, ``runs verify`` (the journal's hash chain) and
``runs show --contract`` (the contract a run used)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import List, Optional

import typer

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


def verify(
    run_id: str = typer.Argument(..., metavar="RUN_ID", help="Run id (a unique prefix is enough)."),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", metavar="DIR", help="Folder of state.db (default .toolloop, or TOOLLOOP_STATE_DIR)."),
) -> None:
    """Recompute the hash chain over a run's records; exit 1 naming the first record that does not match."""
    import orjson

    from ..chain import verify as verify_chain
    from ..engine.resume import find_run
    from ..store import Store, state_dir as pick

    store = Store(pick(str(state_dir) if state_dir else None), create=False)
    try:
        run = find_run(store, run_id)
        links, current = store.chain_of(run["run_id"])
    finally:
        store.close()
    summary = run["summary"] if isinstance(run["summary"], dict) else None
    head = summary.get("chain_sha256") if summary is not None else None

    def parse(text: str) -> dict | None:
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            return None
        return value if isinstance(value, dict) else None

    rid = run["run_id"]
    if not links and current:
        fail(f"run {rid} has no hash chain: it was journaled by a toolloop without tamper evidence", 1)
    verdict = verify_chain(links, current, summary_head=head, parse=parse)
    if not verdict.ok:
        fail(f"run {rid}: the journal does not match its hash chain: {verdict.problem}", 1,
             "the journal was changed after it was written; compare it with a copy of the run's output")
    shown = f", head {verdict.head}" if verdict.head else ""
    sys.stdout.write(f"run {rid}: hash chain holds ({verdict.links} link{'s' if verdict.links != 1 else ''}{shown})\n")


def print_contract(store: object, run: dict) -> None:
    """``runs show --contract``: the contract snapshot stored with the run, as JSON."""
    import json

    snapshot = store.contract_of(run["run_id"])  # type: ignore[attr-defined]
    if snapshot is None:
        fail(f"run {run['run_id']} has no contract snapshot: it was journaled by an older toolloop", 1,
             f"its contract hash is {run['contract_sha256']}")
    sys.stdout.write(json.dumps(snapshot, indent=2, ensure_ascii=False) + "\n")
