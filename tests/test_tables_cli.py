"""Tables for a person: they fit the terminal's width (80 columns included), one line per record,
run ids never split; a run of more than 50 receipts is shown as counts and the receipts not ok."""

from __future__ import annotations

import json
import re

import pytest

from conftest import APP, ROOT, jsonl, write

REG = APP / "registry.yml"
RUN_ID = re.compile(r"\d{8}T\d{6}Z-[0-9a-f]{8}")


def plan(tmp_path, lanes: list[dict], name: str = "plan.yml"):
    return write(tmp_path / name, json.dumps({"version": 1, "registry": str(REG), "subagent": "t", "mode": "parallel",
                                              "max_concurrency": 4, "lanes": lanes}))


def long_lanes(n: int, failing: set[int] = frozenset()) -> list[dict]:
    return [{"item_key": f"customer-invoice-{i:05d}",
             "calls": [{"call_key": f"extract-line-items-{i}", "tool": "boom" if i in failing else "echo",
                        "args": {"text": "a fairly long argument that makes a long result " * 2}}]}
            for i in range(n)]


@pytest.mark.parametrize("columns", [80, 60, 132])
def test_a_receipt_table_fits_the_width_one_line_per_receipt(cli, tmp_path, columns):
    p = plan(tmp_path, long_lanes(5, failing={3}))
    r = cli("run", str(p), "--format", "table", env={"COLUMNS": str(columns)})
    assert r.returncode == 1
    lines = r.stdout.decode().splitlines()
    assert all(len(line) <= columns for line in lines), "\n".join(lines)
    rows = [line for line in lines if re.match(r"^\s*\d+  \S", line)]
    assert len(rows) == 5
    assert [("error" in row) for row in rows] == [False, False, False, True, False]
    summary = " ".join(lines[-2:])  # the closing line may wrap between words, never inside one
    assert "failed run " in summary and "ok 4, error 1" in summary


def test_runs_list_never_splits_a_run_id(cli, tmp_path):
    p = plan(tmp_path, long_lanes(2))
    ids = {jsonl(cli("run", str(p), "--format", "jsonl").stdout)[-1]["run_id"] for _ in range(2)}
    for columns in (80, 50):
        text = cli("runs", "list", "--format", "table", env={"COLUMNS": str(columns)}).stdout.decode()
        assert all(len(line) <= columns for line in text.splitlines()), text
        assert set(RUN_ID.findall(text)) == ids, text  # each id whole, on one line
        assert len([line for line in text.splitlines() if RUN_ID.search(line)]) == 2


def test_a_big_run_shows_counts_then_failures_grouped_by_error_and_skipped_rows_as_counts(cli, tmp_path):
    lanes = long_lanes(60, failing={7, 42, 50})
    for lane in lanes:
        lane["calls"][0]["args"] = {"message": "KeyError: no such sku"}
        lane["calls"].append({"call_key": "after", "tool": "echo", "args": {}})
    lanes[50]["calls"][0]["args"] = {"message": "ValueError: the invoice total is negative"}
    p = plan(tmp_path, lanes)
    r = cli("run", str(p), "--format", "table", env={"COLUMNS": "80"})
    assert r.returncode == 1
    lines = RUN_ID.sub("RUN", r.stdout.decode()).splitlines()
    assert [re.sub("─+", "───", line.rstrip()) for line in lines[:-2]] == [
        "120 receipts: ok 114, error 3, skipped 3 (every receipt: --format jsonl)",
        "not ok (3), identical errors grouped",
        "count  status  tool  error",
        "───",
        "   2×  error   boom  RuntimeError: KeyError: no such sku",
        "   1×  error   boom  RuntimeError: ValueError: the invoice total is negative",
        "skipped 3: an earlier call in their lane ended error",
    ]
    assert all(len(line) <= 80 for line in lines)
    # with room, the first lane and call where each error happened
    wide = cli("run", str(p), "--format", "table", env={"COLUMNS": "120"}).stdout.decode().splitlines()
    assert wide[4].split()[:-1] == ["2×", "error", "boom", "RuntimeError:", "KeyError:", "no", "such", "sku"]
    assert wide[4].split()[-1].startswith("customer-invoice-00007/extract-")
    # the JSON formats still hold every receipt
    assert len(jsonl(cli("run", str(p), "--format", "jsonl").stdout)) == 121
    # all ok: the counts alone
    ok = plan(tmp_path, long_lanes(51), "ok.yml")
    lines = cli("run", str(ok), "--format", "table").stdout.decode().splitlines()
    assert lines[0] == "51 receipts: ok 51 (every receipt: --format jsonl)" and len(lines) == 2


def table_of(records: list[dict], width: int = 80) -> list[str]:
    """What the table writer prints for these records on a console ``width`` columns wide."""
    import io

    from rich.console import Console

    from toolloop_cli.render.records import TableWriter

    out = io.StringIO()
    writer = TableWriter(Console(file=out, width=width, no_color=True, highlight=False))
    for rec in records:
        writer.write(rec)
    writer.close()
    return [re.sub("─+", "───", line.rstrip()) for line in out.getvalue().splitlines()]


ROUTED_RID = "20260102T030405Z-0a1b2c3d"


def routed_records() -> list[dict]:
    def receipt(seq: int, turn: int, tool: str, status: str, result=None, error=None) -> dict:
        return {"type": "receipt", "run_id": ROUTED_RID, "seq": seq, "tool": tool, "item_key": None,
                "call_key": str(turn), "iteration": turn, "status": status, "attempts": 1, "cache": "off",
                "result": result, "error": error, "duration_ms": 2.5}

    def decision(turn: int, action: str, tool=None, args=None, reason="", rejected=None) -> dict:
        return {"type": "decision", "run_id": ROUTED_RID, "iteration": turn, "action": action, "tool": tool,
                "args": args, "reason": reason, "rejected": rejected, "tokens": {"input": 700, "output": 40},
                "model": "m", "duration_ms": 812.0}

    return [
        decision(1, "call", "lookup", {"sku": "A-1"}, "Find the item first."),
        receipt(0, 1, "lookup", "ok", result={"price": 12}),
        {"type": "guardrail", "run_id": ROUTED_RID, "iteration": 1, "guard": "app.guards:mask_prices",
         "tool": "lookup", "action": "mask", "reason": "a price is masked"},
        decision(2, "call", "nope", {}, "Try this.", rejected="tool 'nope' is not allowed"),
        {"type": "supervisor", "run_id": ROUTED_RID, "iteration": 2, "rule": "tool_repeated", "action": "steer",
         "reason": "lookup proposed 2 times", "by": None},
        decision(3, "call", "refund", {"amount": 5}, "Refund it."),
        receipt(1, 3, "refund", "error", error={"kind": "KeyError", "message": "no such order"}),
        decision(4, "final", reason="Enough is known."),
        {"type": "summary", "run_id": ROUTED_RID, "mode": "routed", "status": "ok", "outcome": "final",
         "final": {"answer": "refunded", "amount": 5}, "route": "publish", "error": None,
         "counts": {"ok": 1, "error": 1}, "duration_ms": 2500.0,
         "loop": {"iterations": 4, "tool_calls": 2, "model_calls": 5, "tokens": {"input": 2800, "output": 160},
                  "cost_usd": None}},
    ]


def test_a_routed_run_is_one_timeline_then_its_outcome_route_and_final_answer():
    assert table_of(routed_records()) == [
        "timeline",
        "turn  record      tool / rule    status       ms  detail",
        "───",
        "   1  decision    lookup         call      812.0  Find the item first. · {\"sku\"…",
        "   1  receipt     lookup         ok          2.5  {\"price\":12}",
        "   1  guardrail   lookup         mask             app.guards:mask_prices: a pri…",
        "   2  decision    nope           rejected  812.0  tool 'nope' is not allowed · …",
        "   2  supervisor  tool_repeated  steer            lookup proposed 2 times",
        "   3  decision    refund         call      812.0  Refund it. · {\"amount\":5}",
        "   3  receipt     refund         error       2.5  KeyError: no such order",
        "   4  decision                   final     812.0  Enough is known.",
        f"ok run {ROUTED_RID} (routed): ok 1, error 1 in 2.50s",
        "used: 4 turns, 2 tool calls, 5 model calls, 2,960 tokens",
        "outcome: final   route: publish",
        'final answer: {"answer":"refunded","amount":5}',
    ]
    # no column repeats the run id: it is shown once, on the summary line
    assert sum(ROUTED_RID in line for line in table_of(routed_records())) == 1


def test_a_routed_run_that_ended_otherwise_says_why_and_that_there_is_no_answer():
    records = routed_records()[:2]
    records.append({"type": "summary", "run_id": ROUTED_RID, "mode": "routed", "status": "failed",
                    "outcome": "max_iterations", "final": None, "route": "review_queue", "counts": {"ok": 1},
                    "duration_ms": 10.0, "loop": {"iterations": 1, "tool_calls": 1, "model_calls": 1,
                                                  "tokens": {"input": 700, "output": 40}, "cost_usd": None},
                    "error": {"kind": "max_iterations", "message": "the loop used its 1 turn without a final answer"}})
    assert table_of(records)[-3:] == [
        "outcome: max_iterations   route: review_queue",
        "why: the loop used its 1 turn without a final answer",
        "final answer: none",
    ]


def test_the_routed_example_at_80_columns(cli):
    r = cli("run", str(ROOT / "plans" / "routed-example.yml"), "--format", "table", env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr.decode()
    lines = RUN_ID.sub("RUN", r.stdout.decode()).splitlines()
    assert all(len(line) <= 80 for line in lines)
    rows = [re.split(r"\s{2,}", line.strip()) for line in lines[3:8]]
    # durations vary from run to run (the 5th cell); every other cell is pinned
    assert [row[:4] + [row[5][:20]] for row in rows[:4]] == [
        ["1", "decision", "transform", "call", "The goal asks for th"],
        ["1", "receipt", "transform", "ok", '{"text":"HELLO FROM '],
        ["2", "decision", "count_words", "call", "Count the words of t"],
        ["2", "receipt", "count_words", "ok", '{"words":3}'],
    ]
    assert rows[4][:3] + [rows[4][4][:20]] == ["3", "decision", "final", "The observations hol"]  # no tool
    assert lines[:2] == ["timeline" + " " * 72, lines[1]] and lines[1].split() == [
        "turn", "record", "tool", "/", "rule", "status", "ms", "detail"]
    assert re.sub(r"in \d+\.\d+s", "in Ts", lines[8]) == "ok run RUN (routed): ok 2 in Ts"
    assert lines[9:] == [
        "used: 3 turns, 2 tool calls, 4 model calls, 3,302 tokens",
        "outcome: final   route: publish",
        'final answer: {"shout":"HELLO FROM TOOLLOOP","words":3,"outcome":"done"}',
    ]


def test_approval_requests_at_80_columns_show_the_arguments_and_the_run_id_once(cli, tmp_path):
    lanes = [{"item_key": f"customer-{i:04d}", "calls": [
        {"tool": "pay", "call_key": "write", "args": {"amount": 500 + i, "note": f"refund for order A-{i}"}}]}
        for i in range(3)]
    p = plan(tmp_path, lanes)
    rid = jsonl(cli("run", str(p), "--format", "jsonl").stdout)[-1]["run_id"]
    text = cli("approvals", "list", "--format", "table", env={"COLUMNS": "80"}).stdout.decode()
    lines = [re.sub("─+", "───", line.rstrip()) for line in text.splitlines()]
    assert lines == [
        f"run {rid}: 3 calls waiting",
        "item_key       call_key  seq  tool  effect  args",
        "───",
        'customer-0000  write       0  pay   write   {"amount":500,"note":"refund for or…',
        'customer-0001  write       1  pay   write   {"amount":501,"note":"refund for or…',
        'customer-0002  write       2  pay   write   {"amount":502,"note":"refund for or…',
    ]


def test_a_dry_run_at_80_columns_keeps_the_worst_case_and_labels_its_total(cli, tmp_path):
    p = plan(tmp_path, long_lanes(3))
    r = cli("run", str(p), "--dry-run", "--format", "table", env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr.decode()
    lines = [line.rstrip() for line in r.stdout.decode().splitlines()]
    assert all(len(line) <= 80 for line in lines)
    assert lines[1].split()[:7] == ["seq", "item_key", "call_key", "tool", "effect", "timeout_s", "tries"] \
        and "worst_s" in lines[1].split()
    worst = lines[1].split().index("worst_s")
    assert [re.split(r"\s{2,}", line.strip())[worst] for line in lines[3:6]] == ["10", "10", "10"]
    assert lines[-1] == "dry run (parallel): 3 calls in 3 lanes, 4 at once; worst case 10 s; nothing ran"

    # a routed plan's calls are not known before the model picks them: no made-up worst case
    routed = table_of([{"type": "dry_run", "mode": "routed", "calls": 0, "lanes": None, "max_concurrency": 1,
                        "max_calls": 100, "worst_case_s": 0.0}])
    assert routed == ["dry run (routed): the model picks the calls as it runs; nothing ran"]
