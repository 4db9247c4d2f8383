"""What ``toolloop test`` shows on a terminal: a table of the cases, then each failure in full
(the expectation, what was wanted, what came) and each request diff. Every text is escaped."""

from __future__ import annotations

import json
from typing import Any

from .._text import escape
from .tables import Col, render

_STYLE = {"pass": "green", "fail": "red", "error": "red"}


def _j(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def suite_table(console: Any, records: list[dict]) -> None:
    tests = [r for r in records if r.get("type") == "test"]
    if tests:
        cols = [
            Col("suite", [escape(str(r["suite"])) for r in tests], "key", rank=1),
            Col("case", [escape(str(r["name"])) for r in tests], "key", rank=3),
            Col("status", [r["status"] for r in tests], "whole", style=[_STYLE.get(r["status"], "") for r in tests],
                rank=4),
            Col("passed", [f"{r['passed']}/{r['runs']}" for r in tests], "whole", right=True, rank=2),
            Col("ms", [f"{float(r['duration_ms']):.0f}" for r in tests], "whole", right=True, rank=0),
        ]
        render(console, cols)
    for r in tests:
        if r["status"] == "pass":
            continue
        console.print(f"{escape(str(r['suite']))} {escape(str(r['name']))}: {r['status']}", markup=False,
                      highlight=False)
        for f in r.get("failures") or []:
            console.print(f"  {escape(str(f['expect']))}", markup=False, highlight=False)
            console.print(f"    wanted: {escape(_j(f['wanted']))}", markup=False, highlight=False, soft_wrap=True)
            console.print(f"    got:    {escape(_j(f['got']))}", markup=False, highlight=False, soft_wrap=True)
    summary = next((r for r in records if r.get("type") == "test_summary"), None)
    if summary is not None:
        console.print(f"{summary['passed']} passed, {summary['failed']} failed, {summary['errors']} errors "
                      f"({float(summary['duration_ms']) / 1000:.2f}s)", markup=False, highlight=False)
