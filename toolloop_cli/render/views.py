"""What a table shows for each kind of run, at any width: a batch run's receipts (or, for a big
run, its failures grouped by error), a routed run's timeline and its outcome, route and final
answer, a dry run's calls and its worst case, approval requests grouped by run.

Each function prints through a Rich console; cells are plain text with control characters
escaped, so nothing a tool or a model wrote can style or move the terminal."""

from __future__ import annotations

import re
from typing import Any, Callable

from .._json import dumps
from .._text import escape
from .tables import BIG_RUN, Col, STATUS_STYLES, receipt_columns, record_columns, render

#: the record types of a routed run's timeline, besides receipts
TIMELINE_TYPES = frozenset({"decision", "supervisor", "guardrail"})
#: the most characters of a final answer printed under a table (the JSON formats have all of it)
FINAL_CHARS = 2000
#: at most this many lines of skipped receipts, grouped by why, under a big run's failures
SKIPPED_LINES = 3


def cell(value: Any, width: int = 200) -> str:
    """A value as one line of plain text: text as written, anything else as compact JSON."""
    if value is None:
        return ""
    try:
        text = escape(value if isinstance(value, str) else dumps(value).decode())
    except TypeError:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= width else text[: width - 1] + "…"


def error_cell(error: Any) -> str:
    """``kind: message`` of a receipt's error (the kind alone when it says it all)."""
    if not isinstance(error, dict):
        return cell(error)
    kind, message = error.get("kind") or "", error.get("message") or ""
    if not kind or kind in ("skipped", "denied", "duplicate", "cancelled", "budget_exceeded") or message.startswith(f"{kind}:"):
        return cell(message or kind)
    return cell(f"{kind}: {message}" if message else kind)


def _line(console: Any, text: str, style: str = "") -> None:
    from rich.text import Text

    console.print(Text(text, style=style), soft_wrap=False, overflow="fold")


# --- batch runs -----------------------------------------------------------------------------

def receipt_row(rec: dict) -> list[str]:
    detail = cell(rec["result"], 200) if rec["status"] == "ok" else error_cell(rec.get("error"))
    return [str(rec["seq"]), escape(rec.get("item_key") or ""), escape(rec.get("call_key") or ""),
            escape(rec["tool"]), rec["status"], str(rec["attempts"]), rec["cache"], f"{rec['duration_ms']:.1f}",
            detail]


def show_receipts(console: Any, receipts: list[dict]) -> None:
    """Every receipt, one line each; a run of more than ``BIG_RUN`` receipts as its counts per
    status and its failures grouped by error, the skipped calls folded into a count."""
    if len(receipts) <= BIG_RUN:
        if receipts:
            render(console, receipt_columns([receipt_row(r) for r in receipts], [r["status"] for r in receipts]),
                   title="receipts")
        return
    counts: dict[str, int] = {}
    for rec in receipts:
        counts[rec["status"]] = counts.get(rec["status"], 0) + 1
    _line(console, f"{len(receipts)} receipts: " + ", ".join(f"{k} {v}" for k, v in counts.items())
          + " (every receipt: --format jsonl)")
    failed = [r for r in receipts if r["status"] not in ("ok", "skipped")]
    if failed:
        _show_failures(console, failed)
    _show_skipped(console, receipts)


def _show_failures(console: Any, failed: list[dict]) -> None:
    """The failed receipts grouped by status, tool and error, the biggest group first."""
    groups: dict[tuple, list[dict]] = {}
    for rec in failed:
        groups.setdefault((rec["status"], rec["tool"], error_cell(rec.get("error"))), []).append(rec)
    rows = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1][0]["seq"]))
    cols = [
        Col("count", [f"{len(recs)}×" for _k, recs in rows], "whole", right=True),
        Col("status", [k[0] for k, _r in rows], "whole", style=[STATUS_STYLES.get(k[0], "red") for k, _r in rows]),
        Col("tool", [escape(k[1]) for k, _r in rows], "key", rank=11),
        # the message whole where it can be: the first place it happened goes first
        Col("error", [k[2] for k, _r in rows], "text", rank=9, least=80),
        Col("first", [_where(recs[0]) for _k, recs in rows], "key", rank=10, spare=True),
    ]
    render(console, cols, title=f"not ok ({len(failed)}), identical errors grouped")


def _show_skipped(console: Any, receipts: list[dict]) -> None:
    """The skipped calls counted by reason, the commonest first."""
    skipped: dict[str, int] = {}
    for rec in receipts:
        if rec["status"] == "skipped":
            why = _skip_reason(error_cell(rec.get("error")))
            skipped[why] = skipped.get(why, 0) + 1
    for why, n in sorted(skipped.items(), key=lambda kv: -kv[1])[:SKIPPED_LINES]:
        _line(console, f"skipped {n}: {why}")
    if len(skipped) > SKIPPED_LINES:
        _line(console, f"skipped {sum(n for _w, n in sorted(skipped.items(), key=lambda kv: -kv[1])[SKIPPED_LINES:])}"
                       ": for other reasons")


_LANE_ENDED = re.compile(r"^call '.*' in this lane ended (\w+)$")


def _skip_reason(message: str) -> str:
    """Why calls were skipped, without the key of the call that stopped each lane, so the lanes
    stopped for the same reason are counted together."""
    ended = _LANE_ENDED.match(message)
    return f"an earlier call in their lane ended {ended.group(1)}" if ended else message


def _where(rec: dict) -> str:
    """Where a receipt is found: its lane and call, or its seq."""
    keys = [k for k in (rec.get("item_key"), rec.get("call_key")) if k]
    return escape("/".join(keys)) if keys else f"seq {rec['seq']}"


# --- routed runs ----------------------------------------------------------------------------

def timeline_row(rec: dict) -> tuple[list[str], str]:
    """``[turn, record, tool / rule, status, ms, detail]`` and the status cell's style."""
    kind = rec.get("type", "")
    turn = "" if rec.get("iteration") is None else str(rec["iteration"])
    ms = "" if rec.get("duration_ms") is None else f"{rec['duration_ms']:.1f}"
    if kind == "receipt":
        detail = cell(rec.get("result")) if rec["status"] == "ok" else error_cell(rec.get("error"))
        return [turn, "receipt", escape(rec["tool"]), rec["status"], ms, detail], STATUS_STYLES.get(rec["status"], "red")
    if kind == "decision":
        rejected = rec.get("rejected")
        status = "rejected" if rejected else cell(rec.get("action"))
        reason = cell(rec.get("reason"))
        detail = (f"{cell(rejected)} · {reason}" if rejected else
                  f"{reason} · {cell(rec['args'])}" if rec.get("args") is not None else reason)
        return [turn, "decision", cell(rec.get("tool")), status, ms, detail], "red" if rejected else ""
    if kind == "supervisor":
        by = f" (by {cell(rec['by'])})" if rec.get("by") else ""
        return ([turn, "supervisor", cell(rec.get("rule")), cell(rec.get("action")), "", cell(rec.get("reason")) + by],
                "" if rec.get("action") == "continue" else "yellow")
    if kind == "guardrail":
        return ([turn, "guardrail", cell(rec.get("tool")) or "(final)", cell(rec.get("action")), "",
                 f"{cell(rec.get('guard'))}: {cell(rec.get('reason'))}"], "yellow")
    rest = {k: v for k, v in rec.items() if k not in ("type", "run_id", "iteration")}
    return [turn, cell(kind), "", "", "", cell(rest)], ""


def show_timeline(console: Any, records: list[dict]) -> None:
    """A routed run's records in the order they happened: decisions, receipts, supervisor and
    guardrail records in one table. A run of more than ``BIG_RUN`` receipts keeps the records a
    person must look at: the receipts not ok, rejected decisions, supervisor and guardrail records
    and the last decision."""
    receipts = [r for r in records if r.get("type") == "receipt"]
    title = "timeline"
    if len(receipts) > BIG_RUN:
        last_decision = next((r for r in reversed(records) if r.get("type") == "decision"), None)
        counts: dict[str, int] = {}
        for rec in receipts:
            counts[rec["status"]] = counts.get(rec["status"], 0) + 1
        _line(console, f"{len(receipts)} receipts: " + ", ".join(f"{k} {v}" for k, v in counts.items())
              + " (every record: --format jsonl)")
        records = [r for r in records if r is last_decision or r.get("type") in ("supervisor", "guardrail")
                   or (r.get("type") == "receipt" and r["status"] != "ok")
                   or (r.get("type") == "decision" and r.get("rejected"))]
        title = "timeline: what needs a look"
    if not records:
        return
    laid = [timeline_row(r) for r in records]
    rows = [row for row, _style in laid]

    def column(i: int) -> list[str]:
        return [row[i] for row in rows]

    cols = [
        Col("turn", column(0), "whole", right=True),
        Col("record", column(1), "whole"),
        Col("tool / rule", column(2), "key", rank=5),
        Col("status", column(3), "whole", style=[style for _row, style in laid]),
        Col("ms", column(4), "key", right=True, rank=2, spare=True),
        Col("detail", column(5), "text", rank=4, least=24),
    ]
    render(console, cols, title=title)


def routed_ending(console: Any, summary: dict) -> None:
    """After the summary line: the outcome and the route, then the final answer (or why there is
    none)."""
    outcome = summary.get("outcome")
    route = summary.get("route")
    _line(console, f"outcome: {cell(outcome) or 'none yet'}" + (f"   route: {cell(route)}" if route else "   route: none"),
          "bold")
    error = summary.get("error")
    if isinstance(error, dict) and error.get("message"):
        _line(console, f"why: {cell(error.get('message'), FINAL_CHARS)}")
    tainted = summary.get("tainted_by")
    if isinstance(tainted, dict):  # every write after it was gated, denied or allowed by taint.on_write
        _line(console, f"tainted: {cell(tainted.get('tool'))} at turn {cell(tainted.get('iteration'))} (untrusted content)")
    final = summary.get("final")
    if final is not None:
        _line(console, f"final answer: {cell(final, FINAL_CHARS)}")
    elif outcome == "paused":
        budget = _paused_budget(summary.get("paused_by"))
        how = f"raise its {cell(budget)} with resume --raise" if budget else "resume it"
        _line(console, f"final answer: none yet (the run is paused; {how} to go on)")
    else:
        _line(console, "final answer: none")


def _paused_budget(paused_by: Any) -> str | None:
    """The budget that paused a run, its own or down its paused child runs (``paused_by``)."""
    while isinstance(paused_by, dict):
        if paused_by.get("kind") == "budget":
            return str(paused_by.get("budget"))
        paused_by = paused_by.get("child")
    return None


def loop_text(summary: dict) -> str:
    """``3 turns, 2 tool calls, 4 model calls, 3,302 tokens`` from a routed summary's ``loop``."""
    loop = summary.get("loop") or {}
    if not loop:
        return ""
    tokens = loop.get("tokens") or {}
    used = sum(v for v in tokens.values() if isinstance(v, int))
    parts = [_n(loop.get("iterations", 0), "turn"), _n(loop.get("tool_calls", 0), "tool call"),
             _n(loop.get("model_calls", 0), "model call"), _n(used, "token")]
    if loop.get("cost_usd") is not None:
        parts.append(f"${loop['cost_usd']:.4f}")
    return ", ".join(parts)


def _n(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


# --- dry runs ---------------------------------------------------------------------------------

def show_dry_run(console: Any, planned: list[dict], total: dict | None) -> None:
    """The calls a dry run admitted, each with its worst-case time, then a labelled total."""
    if planned:
        def column(key: str, show: Callable[[Any], str] = cell) -> list[str]:
            return [show(rec.get(key)) for rec in planned]

        cols = [
            Col("seq", column("seq", str), "whole", right=True),
            Col("item_key", column("item_key"), "key", rank=5),
            Col("call_key", column("call_key"), "key", rank=6),
            Col("tool", column("tool"), "key", rank=7),
            Col("effect", column("effect"), "key", rank=3),
            Col("timeout_s", column("timeout_s", _seconds), "key", right=True, rank=2),
            Col("tries", column("max_attempts", str), "key", right=True, rank=1),
            Col("worst_s", column("worst_case_s", _seconds), "whole", right=True),
            Col("args", column("args"), "text", rank=4),
        ]
        if not any(cols[1].cells):
            del cols[1]
        render(console, cols, title="would run")
    if total is not None and total.get("mode") == "routed":
        # no call is known before the model picks it: no list, and no worst case made up
        _line(console, "dry run (routed): the model picks the calls as it runs; nothing ran", "bold")
    elif total is not None:
        lanes = f" in {total['lanes']} lanes, {total['max_concurrency']} at once" if total.get("lanes") is not None else ""
        limit = f"; at most {total['max_calls']} calls" if total.get("max_calls") is not None else ""
        _line(console, f"dry run ({cell(total.get('mode'))}): {_n(total.get('calls', 0), 'call')}{lanes}{limit};"
                       f" worst case {_seconds(total.get('worst_case_s'))} s; nothing ran", "bold")


def _seconds(value: Any) -> str:
    if value is None:
        return ""
    return f"{value:g}" if isinstance(value, (int, float)) else cell(value)


# --- other records ----------------------------------------------------------------------------

def show_records(console: Any, records: list[dict], plain: Callable[[Any], str]) -> None:
    """Records of another kind (runs, tools, approval requests, notifications). Approval requests
    are grouped by run, the run id in each group's title, so the arguments a person decides on
    keep the width; records that all belong to one run show its id once, in the title."""
    if not records:
        return
    if all(r.get("type") == "approval_request" for r in records):
        runs: dict[str, list[dict]] = {}
        for rec in records:
            runs.setdefault(rec.get("run_id") or "", []).append(rec)
        for rid, group in runs.items():
            # a run's taint is one fact: its gated writes all wait "after untrusted content from TOOL at turn N"
            taint = next((r.get("reason") for r in group if r.get("taint")), None)
            title = f"run {cell(rid)}: {_n(len(group), 'call')} waiting" + (f", {cell(taint)}" if taint else "")
            render(console, request_columns(group, plain), title=title)
        return
    run_ids = {r.get("run_id") for r in records}
    if len(run_ids) == 1 and None not in run_ids and all(r.get("type") != "run" for r in records):
        rows = [{k: v for k, v in r.items() if k != "run_id"} for r in records]
        render(console, record_columns(rows, plain), title=f"run {cell(next(iter(run_ids)))}")
        return
    render(console, record_columns(records, plain))


def request_columns(requests: list[dict], plain: Callable[[Any], str]) -> list[Col]:
    """Approval requests of one run: the arguments a person decides on keep their width; when
    the line is short, the time, seq and gate go first."""
    cols = record_columns([{k: v for k, v in r.items() if k != "run_id"} for r in requests], plain)
    for col in cols:
        if col.header == "args":
            col.least = 30
        elif col.header in ("requested_at", "seq", "approval", "reason", "taint"):
            col.spare = True
    return cols
