"""runs prune: the journal only grows unless finished runs are deleted."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Optional

import typer

from .common import fail

_AGE = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> float:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` in seconds; ValueError otherwise."""
    found = _AGE.match(text.strip())
    if found is None:
        raise ValueError(text)
    return float(found.group(1)) * _UNIT_S[found.group(2)]


def _size(n: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} bytes" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} bytes"


def prune(
    older_than: Optional[str] = typer.Option(None, "--older-than", metavar="AGE", help="Delete finished runs older than AGE (30d, 12h, 90m)."),
    keep: Optional[int] = typer.Option(None, "--keep", metavar="N", help="Keep the N most recent finished runs."),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", metavar="DIR", help="Folder of state.db (default .toolloop, or TOOLLOOP_STATE_DIR)."),
) -> None:
    """Delete finished runs and the cache entries only they used; report what was freed.

    Paused and running runs are never deleted and do not count toward --keep. With both options a
    run goes when it is older than AGE and not among the N most recent."""
    if older_than is None and keep is None:
        fail("give --older-than AGE, --keep N, or both", 2, "e.g. toolloop runs prune --older-than 30d --keep 20")
    cutoff = None
    if older_than is not None:
        try:
            cutoff = time.time() - parse_age(older_than)
        except ValueError:
            fail(f"--older-than {older_than[:20]!r} is not an age", 2, "write a number and a unit: 30d, 12h, 90m, 45s, 2w")
    if keep is not None and keep < 0:
        fail("--keep must be 0 or more", 2)
    from ..store import Store, state_dir as pick

    store = Store(pick(str(state_dir) if state_dir else None), create=False)
    try:
        finished = store.prunable_runs()  # newest first
        doomed = finished[keep:] if keep is not None else finished
        if cutoff is not None:
            doomed = [r for r in doomed if (r["finished_at"] or r["started_at"]) < cutoff]
        before = store.size_bytes()
        gone = store.delete_runs(doomed)
        compacted = store.compact() if doomed else True
        after = store.size_bytes()
    finally:
        store.close()
    kept = len(finished) - gone["runs"]
    if not gone["runs"]:
        sys.stderr.write(f"nothing to prune: {len(finished)} finished run{'s' if len(finished) != 1 else ''} kept\n")
        return
    freed = (f"freed {_size(before - after)} ({store.path} {_size(before)} -> {_size(after)})" if compacted
             else "the space is reused by later runs (another process holds the database)")
    sys.stderr.write(
        f"pruned {gone['runs']} run{'s' if gone['runs'] != 1 else ''} ({gone['receipts']} receipts) and"
        f" {gone['cache_entries']} cache entr{'ies' if gone['cache_entries'] != 1 else 'y'}; {kept} finished"
        f" run{'s' if kept != 1 else ''} kept; {freed}\n")
