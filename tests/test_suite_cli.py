"""``toolloop test`` as users run it (subprocesses): the project's example suite passes on a fresh
folder, a failing case exits 1 with each failure in full on a terminal table and in JUnit XML,
--record then a changed prompt prints a unified diff, a rejected suite exits 3 with findings,
usage errors exit 2, and validate and schema know suite files."""

from __future__ import annotations

import json
import shutil
from xml.etree import ElementTree as ET

import jsonschema

from conftest import ROOT, jsonl, write
from toolloop_cli.record_schema import receipt_schema

SUITE = ROOT / "plans" / "suite.yml"


def test_the_example_suite_passes_in_a_fresh_folder(cli, tmp_path):
    proc = cli("test", str(SUITE))
    assert proc.returncode == 0, proc.stderr.decode()
    records = jsonl(proc.stdout)
    validator = jsonschema.Draft202012Validator(receipt_schema())
    for rec in records:
        validator.validate(rec)
    assert [r["type"] for r in records] == ["test", "test", "test_summary"]
    assert all(r["status"] == "pass" and r["runs"] == 1 and len(r["run_ids"]) == 1 for r in records[:2])
    assert records[-1] | {"duration_ms": 0} == {"type": "test_summary", "passed": 2, "failed": 0, "errors": 0,
                                                 "duration_ms": 0}
    runs = jsonl(cli("runs", "list", "--label", "toolloop.test=suite.yml:survives-a-timeout", "-f", "jsonl").stdout)
    assert [r["run_id"] for r in runs] == records[1]["run_ids"]


def _copy_example(tmp_path):
    """plans/routed-example.yml and its files in tmp_path, its registry named absolutely."""
    plans = tmp_path / "plans"
    shutil.copytree(ROOT / "plans" / "prompts", plans / "prompts")
    shutil.copytree(ROOT / "plans" / "fixtures", plans / "fixtures")
    text = (ROOT / "plans" / "routed-example.yml").read_text()
    (plans / "routed-example.yml").write_text(text.replace("../registries/demo.yml", str(ROOT / "registries" / "demo.yml")))
    return plans


def test_a_failing_case_exits_1_with_each_failure_in_full_and_junit_xml(cli, tmp_path):
    _copy_example(tmp_path)
    write(tmp_path / "plans" / "suite.yml", """
        version: 1
        kind: suite
        cases:
          - name: wrong-count
            plan: routed-example.yml
            fixture: fixtures/routed-example.jsonl
            tools: live
            expect: {final: {words: 4}, never: [count_words]}
          - name: fine
            plan: routed-example.yml
            fixture: fixtures/routed-example.jsonl
            tools: live
    """)
    proc = cli("test", "plans/suite.yml", "--format", "table", "--junit", "out.xml")
    assert proc.returncode == 1, proc.stderr.decode()
    out = proc.stdout.decode()
    assert "wrong-count" in out and "fail" in out and "fine" in out and "pass" in out
    assert "  final.words\n    wanted: 4\n    got:    3\n" in out
    assert "  never[0]\n    wanted: \"no call of count_words\"\n" in out
    assert "1 passed, 1 failed, 0 errors" in out
    root = ET.parse(tmp_path / "out.xml").getroot()
    (suite,) = root.findall("testsuite")
    assert (suite.get("name"), suite.get("tests"), suite.get("failures")) == ("plans/suite.yml", "2", "1")
    failure = suite.find("testcase[@name='wrong-count']/failure")
    assert failure.get("message") == "final.words: wanted 4, got 3"
    assert suite.find("testcase[@name='fine']/failure") is None


def test_record_then_a_changed_prompt_fails_with_a_unified_diff(cli, tmp_path):
    plans = _copy_example(tmp_path)
    write(plans / "suite.yml", """
        version: 1
        kind: suite
        cases:
          - name: unchanged
            plan: routed-example.yml
            fixture: fixtures/recorded.jsonl
            expect: {requests_unchanged: true, outcome: final}
    """)
    proc = cli("test", "plans/suite.yml", "--record")
    assert proc.returncode == 0, proc.stderr.decode()
    assert (plans / "fixtures" / "recorded.jsonl").exists()
    assert cli("test", "plans/suite.yml").returncode == 0
    plan = plans / "routed-example.yml"
    plan.write_text(plan.read_text().replace("goal: Shout the greeting", "goal: Whisper the greeting"))
    proc = cli("test", "plans/suite.yml")
    assert proc.returncode == 1
    (rec, _summary) = jsonl(proc.stdout)
    assert rec["status"] == "fail" and rec["failures"][0]["expect"] == "requests_unchanged"
    err = proc.stderr.decode()
    assert "--- recorded request 1\n+++ request 1\n" in err
    removed = [line for line in err.splitlines() if line.startswith("-") and "Shout the greeting" in line]
    added = [line for line in err.splitlines() if line.startswith("+") and "Whisper the greeting" in line]
    assert removed and added and rec["diff"] in err


def test_a_rejected_suite_exits_3_with_findings_and_usage_errors_exit_2(cli, tmp_path):
    write(tmp_path / "bad.yml", f"""
        version: 1
        kind: suite
        cases:
          - name: a
            plan: {ROOT / "plans" / "routed-example.yml"}
            fixture: {ROOT / "plans" / "fixtures" / "routed-example.jsonl"}
            expect: {{never: [transfrom]}}
    """)
    proc = cli("test", "bad.yml")
    assert proc.returncode == 3 and proc.stdout == b""
    assert ("bad.yml:7:22: error TL502 cases[0].expect.never[0]: tool 'transfrom' is not in the plan's registry"
            " (subagent 'worker-a') (did you mean 'transform'?)") in proc.stderr.decode()
    assert cli("test", "missing.yml").returncode == 2
    assert cli("test", str(SUITE), "--repeat", "0").returncode == 2


def test_validate_checks_suite_files_and_schema_prints_the_suites(cli, tmp_path):
    write(tmp_path / "bad.yml", f"""
        version: 1
        kind: suite
        cases:
          - {{name: a, plan: {ROOT / "plans" / "routed-example.yml"}, fixture: none.jsonl}}
    """)
    proc = cli("validate", "bad.yml")
    assert proc.returncode == 1
    col = (tmp_path / "bad.yml").read_text().splitlines()[3].index("none.jsonl") + 1
    assert (f"bad.yml:4:{col}: error TL501 cases[0].fixture: fixture none.jsonl not found (fix the path: it is"
            " relative to the suite file)") in proc.stdout.decode()
    assert "1 suite" in proc.stderr.decode()
    proc = cli("validate", str(SUITE))
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    schema = json.loads(cli("schema", "suite").stdout)
    assert schema["title"] == "toolloop suite" and "cases" in schema["properties"]
