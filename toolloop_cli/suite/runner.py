"""A whole ``toolloop test``: every suite loaded and checked before any case runs, then each case
kept by ``-k`` run ``repeat`` times (or recorded first), one ``test`` record per case and a
``test_summary`` last. Nothing here prints: records go to the caller's ``emit``."""

from __future__ import annotations

import os
import time
from typing import Any, Callable

from ..errors import ConfigError
from .case import CaseRun, CaseSettings, record_fixture, run_case
from .load import Case, Suite, load_suite


def load_suites(paths: list[str | os.PathLike[str]], *, recording: bool = False) -> list[Suite]:
    """Every suite, or ConfigError with every finding of all of them (nothing runs then);
    ``recording``: fixtures need not exist yet."""
    suites, problems = [], []
    for path in paths:
        suite, found = load_suite(path, recording=recording)
        problems += found
        if suite is not None:
            suites.append(suite)
    if any(p.level == "error" for p in problems):
        raise ConfigError(problems)
    return suites


def test_record(case: Case, runs: list[CaseRun]) -> dict:
    """The ``test`` record of a case: ``pass`` only when every run passed; ``error`` when any
    errored; the failures of the first run that did not pass."""
    statuses = [r.verdict.status for r in runs]
    status = "error" if "error" in statuses else "fail" if "fail" in statuses else "pass"
    first = next((r for r in runs if r.verdict.status != "pass"), None)
    rec = {
        "type": "test", "suite": case.suite, "name": case.name, "status": status, "runs": len(runs),
        "passed": statuses.count("pass"), "run_ids": [r.run_id for r in runs if r.run_id is not None],
        "failures": first.verdict.failures if first is not None else [],
        "duration_ms": round(sum(r.duration_ms for r in runs), 3),
    }
    if first is not None and first.verdict.diff is not None:
        rec["diff"] = first.verdict.diff
    return rec


def run_suites(suites: list[Suite], settings: CaseSettings, emit: Callable[[dict], None], *, repeat: int = 1,
               pattern: str | None = None, record: bool = False,
               on_case: Callable[[dict], Any] | None = None) -> tuple[dict, bool]:
    """Run the cases and emit their records; returns the ``test_summary`` (emitted last) and
    whether a signal interrupted a case (the cases after it do not run)."""
    t0 = time.perf_counter()
    counts = {"pass": 0, "fail": 0, "error": 0}
    interrupted = False
    for case in (c for suite in suites for c in suite.cases):
        if pattern is not None and pattern not in case.name:
            continue
        runs = _runs(case, settings, repeat, record)
        rec = test_record(case, runs)
        counts[rec["status"]] += 1
        emit(rec)
        if on_case is not None:
            on_case(rec)
        if any(r.interrupted for r in runs):
            interrupted = True
            break
    summary = {"type": "test_summary", "passed": counts["pass"], "failed": counts["fail"], "errors": counts["error"],
               "duration_ms": round((time.perf_counter() - t0) * 1000, 3)}
    emit(summary)
    return summary, interrupted


def _runs(case: Case, settings: CaseSettings, repeat: int, record: bool) -> list[CaseRun]:
    fixture = None
    if record:
        live, fixture = record_fixture(case, settings)
        if fixture is None or live.interrupted:  # it could not start, or there is no fixture to write: the live run is the check
            return [live]
    runs: list[CaseRun] = []
    for _ in range(repeat):
        runs.append(run_case(case, settings, fixture=fixture))
        if runs[-1].interrupted:
            break
    return runs
