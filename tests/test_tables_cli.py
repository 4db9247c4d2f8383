"""Tables for a person: they fit the terminal's width (80 columns included), one line per record,
run ids never split; a run of more than 50 receipts is shown as counts and the receipts not ok."""

from __future__ import annotations

import json
import re

import pytest

from conftest import APP, jsonl, write

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


def test_a_big_run_shows_counts_and_the_receipts_not_ok(cli, tmp_path):
    p = plan(tmp_path, long_lanes(60, failing={7, 42}))
    r = cli("run", str(p), "--format", "table", env={"COLUMNS": "80"})
    assert r.returncode == 1
    lines = r.stdout.decode().splitlines()
    assert lines[0] == "60 receipts: ok 58, error 2; the 2 not ok: (every receipt: --format jsonl)"
    rows = [line for line in lines if re.match(r"^\s*\d+  \S", line)]
    assert [row.split()[0] for row in rows] == ["7", "42"]
    assert all(len(line) <= 80 for line in lines)
    assert len(lines) < 10
    # the JSON formats still hold every receipt
    assert len(jsonl(cli("run", str(p), "--format", "jsonl").stdout)) == 61
    # all ok: the counts alone
    ok = plan(tmp_path, long_lanes(51), "ok.yml")
    lines = cli("run", str(ok), "--format", "table").stdout.decode().splitlines()
    assert lines[0] == "51 receipts: ok 51 (every receipt: --format jsonl)" and len(lines) == 2
