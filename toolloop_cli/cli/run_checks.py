"""What ``run`` decides around a run, outside the engine: flags that do not fit the plan (a usage
error, exit 2), the summary a rejected plan still ends standard output with, and whether to show
live progress."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import IO, Any

MODES = ("sequential", "parallel", "routed")


def plan_mode(path: Path) -> str | None:
    """The ``mode`` a plan file declares, read without admitting it (None when it cannot be told;
    admission then reports why)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        node = yaml.compose(path.read_text(encoding="utf-8"), Loader=loader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    if not isinstance(node, yaml.MappingNode):
        return None
    for key, value in node.value:
        if isinstance(key, yaml.ScalarNode) and key.value == "mode" and isinstance(value, yaml.ScalarNode):
            return value.value if value.value in MODES else None
    return None


def lanes_refusal(path: Path) -> str | None:
    """Why ``--lanes`` cannot go with this plan (lanes belong to parallel plans), or None."""
    mode = plan_mode(path)
    if mode is None or mode == "parallel":
        return None
    return f"--lanes adds lanes to a parallel plan, and {path} is a {mode} plan"


def rejected_summary(mode: str | None, started: float, executor: str = "local") -> dict:
    """The summary record of a plan that was rejected: nothing ran, so there is no run id and no
    receipt; ``status`` is ``rejected`` (exit 3)."""
    from ..receipts import summary_record

    record = summary_record(None, mode, "rejected", {}, (time.perf_counter() - started) * 1000, None,
                            executor=executor)
    return record


def write_rejected_summary(fmt: Any, plan: Path | None, started: float, mode: str | None = None,
                           executor: str = "local") -> None:
    """End standard output with the rejected summary in ``jsonl`` and ``json`` (a table shows
    nothing: the findings on standard error say it all)."""
    from .common import record_writer, resolve_format

    chosen = resolve_format(fmt, sys.stdout)
    if chosen not in ("jsonl", "json"):
        return
    out: IO[bytes] = sys.stdout.buffer
    writer = record_writer(chosen, out)
    try:
        writer.write(rejected_summary(mode if mode is not None else (plan_mode(plan) if plan else None), started,
                                      executor))
        writer.close()
    except BrokenPipeError:
        pass


#: ``run --no-progress`` (one command per process: the command line sets it once)
_progress = {"on": True}


def set_progress(on: bool) -> None:
    _progress["on"] = on


def progress_wanted(out: Any) -> bool:
    """Live progress on standard error whenever it is a terminal, unless ``--no-progress``; not
    when JSON records go to that same terminal (the two would garble each other)."""
    if not _progress["on"] or not sys.stderr.isatty():
        return False
    try:
        records_on_terminal = out.stream.isatty()
    except (AttributeError, ValueError):
        records_on_terminal = False
    return out.fmt == "table" or not records_on_terminal
