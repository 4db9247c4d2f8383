"""engine/launch.py in process: a run's options are one form, journaled as they are and read back
by ``RunOptions.from_journal``; a resume runs with the options its run was started with (those the
command gives replace them); ``toolloop serve`` resumes a run in its own process through it."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from conftest import write
from servekit import registry

from toolloop_cli import _json
from toolloop_cli.engine.launch import HaltPolicy, Launch, RunOptions, resumed_options
from toolloop_cli.store import Store

#: a value other than the default for every journaled option
NON_DEFAULT = {
    "halt": HaltPolicy("soon", fail_count=1),
    "default_timeout_s": 7.5,
    "no_cache": True,
    "refresh_cache": True,
    "output_cap_bytes": 1 << 20,
    "approve": "all",
    "order": "completion",
    "executor": "ray",
    "ray_address": "127.0.0.1:6379",
}


class Records:
    def __init__(self) -> None:
        self.got: list[dict] = []
        self.flushes = 0

    def write(self, record: dict, line: bytes | None = None) -> None:
        self.got.append(record)

    def flush(self) -> None:
        self.flushes += 1


def journaled_fields() -> list[str]:
    return [f.name for f in dataclasses.fields(RunOptions) if f.metadata.get("journaled")]


def journaled(options: RunOptions) -> dict:
    return {name: getattr(options, name) for name in journaled_fields()}


def test_every_journaled_option_comes_back_equal_through_the_journals_json():
    assert sorted(NON_DEFAULT) == sorted(journaled_fields())  # a new journaled option needs a value here
    defaults = RunOptions()
    assert all(getattr(defaults, k) != v for k, v in NON_DEFAULT.items())
    options = RunOptions(**NON_DEFAULT, labels={"team": "a"}, handle_signals=False)
    form = options.journal_form()
    assert sorted(form) == sorted(journaled_fields())
    back = RunOptions.from_journal(_json.loads(_json.dumps({**form, "subagent": "t", "max_concurrency": 2})))
    assert journaled(back) == NON_DEFAULT
    assert back.labels is None and back.handle_signals is True  # neither is journaled with the options
    # a run journaled by an older toolloop lacks options: they take their defaults
    assert RunOptions.from_journal({"subagent": "t"}) == RunOptions() == RunOptions.from_journal(None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.order = "input"  # type: ignore[misc]


def test_resume_options_keep_the_runs_own_and_take_the_command_lines():
    form = RunOptions(**NON_DEFAULT).journal_form()
    assert journaled(resumed_options(form)) == NON_DEFAULT
    halt = HaltPolicy("now", fail_percent=50.0)
    changed = resumed_options(form, halt=halt, order="input", approve="none")
    assert journaled(changed) == {**NON_DEFAULT, "halt": halt, "order": "input", "approve": "none"}
    # another executor than Ray forgets the run's Ray address; Ray keeps it unless one is given
    assert (resumed_options(form, executor="local").executor, resumed_options(form, executor="local").ray_address) == (
        "local", None)
    assert resumed_options(form, executor="ray").ray_address == "127.0.0.1:6379"
    assert resumed_options(form, executor="local", ray_address="10.0.0.1:1").ray_address == "10.0.0.1:1"


def plan(tmp_path, body: dict):
    write(tmp_path / "reg.yml", registry())
    return write(tmp_path / "plan.yml", json.dumps({"version": 1, "registry": "reg.yml", "subagent": "t", **body}))


def started(tmp_path, options: RunOptions, body: dict):
    launch = Launch(tmp_path / "state")
    prepared = launch.admit(plan(tmp_path, body), options)
    sink = Records()
    result = launch.start(prepared, sink, handle_signals=False)
    assert sink.got[-1] == result.summary
    # the sink is flushed after each batch of receipts handed to it (a paused run has none)
    assert sink.flushes >= (1 if len(sink.got) > 1 else 0)
    return result


def journal_options(tmp_path, run_id: str) -> dict:
    store = Store(tmp_path / "state", create=False)
    try:
        return store.get_run(run_id)["options"]
    finally:
        store.close()


def test_a_run_journals_its_options_as_they_are_and_they_read_back_equal(tmp_path):
    given = {**NON_DEFAULT, "executor": "local", "refresh_cache": False}  # a real run, on this machine
    options = RunOptions(**given, labels={"team": "a"})
    result = started(tmp_path, options, {"mode": "sequential", "calls": [{"tool": "echo", "args": {"n": 1}}]})
    assert result.summary["status"] == "ok" and result.summary["labels"] == {"team": "a"}
    stored = journal_options(tmp_path, result.summary["run_id"])
    assert {k: stored[k] for k in journaled_fields()} == options.journal_form()
    assert journaled(RunOptions.from_journal(stored)) == given


def test_a_resume_runs_with_the_options_its_run_was_started_with(tmp_path):
    given = {"halt": HaltPolicy("soon", fail_count=1), "approve": "all", "order": "completion",
             "default_timeout_s": 9.0, "no_cache": True, "output_cap_bytes": 1 << 20}
    lanes = [{"item_key": "a", "calls": [{"tool": "boom", "args": {}}]},
             {"item_key": "b", "calls": [{"tool": "pay", "args": {"amount": 500, "to": "x"}}]},
             {"item_key": "c", "calls": [{"tool": "boom", "args": {}}]},
             {"item_key": "d", "calls": [{"tool": "echo", "args": {}}]}]
    body = {"mode": "parallel", "max_concurrency": 1, "lanes": lanes}
    boom = """
      boom:
        callable: testapp.tools:boom
        description: Always raises.
        input_schema: {type: object}
        output_schema: {}
"""
    write(tmp_path / "reg.yml", registry(extra=boom))
    p = write(tmp_path / "plan.yml", json.dumps({"version": 1, "registry": "reg.yml", "subagent": "t", **body}))
    first_launch = Launch(tmp_path / "state")
    first = first_launch.start(first_launch.admit(p, RunOptions(**given)), Records(), handle_signals=False)
    rid = first.summary["run_id"]
    assert first.summary["status"] == "stopped"  # the halt policy stopped the run after lane a

    def resumed(launch, prepared) -> tuple[dict, dict]:
        sink = Records()
        result = launch.start(prepared, sink, handle_signals=False)
        return {r["item_key"]: r["status"] for r in sink.got if r["type"] == "receipt"}, result.summary

    launch = Launch(tmp_path / "state")
    prepared = launch.resume(rid[:12])
    assert prepared.run_id == rid and journaled(prepared.options) == journaled(RunOptions(**given))
    statuses, summary = resumed(launch, prepared)
    # approve=all, as the run was started: the gated call ran without waiting for a person; and the
    # halt policy it was started with stopped it again after lane c
    assert statuses == {"a": "error", "b": "ok", "c": "error", "d": "skipped"} and summary["status"] == "stopped"

    launch = Launch(tmp_path / "state")
    statuses, summary = resumed(launch, launch.resume(rid, halt=HaltPolicy("soon", fail_percent=100.0)))
    assert statuses == {"a": "error", "b": "ok", "c": "error", "d": "ok"} and summary["status"] == "failed"
    stored = RunOptions.from_journal(journal_options(tmp_path, rid))
    assert journaled(stored) == journaled(RunOptions(**{**given, "halt": HaltPolicy("soon", fail_percent=100.0)}))


def test_serve_resumes_a_run_in_its_own_process(tmp_path):
    pytest.importorskip("starlette")
    from toolloop_cli.serve.journal import Journal

    body = {"mode": "sequential", "calls": [{"tool": "marker", "call_key": "mark",
                                             "args": {"path": str(tmp_path / "marked.txt")}}]}
    options = RunOptions(order="completion", default_timeout_s=11.0)
    paused = started(tmp_path, options, body)
    rid = paused.summary["run_id"]
    assert paused.summary["status"] == "stopped"
    lines: list[str] = []
    journal = Journal(tmp_path / "state", log=lines.append)
    try:
        assert journal.store.answer_approval(rid, None, "mark", "approved", approver="test")
        got_id, resuming = journal.start_resume(rid)
        assert got_id == rid and resuming.pid == os.getpid()
        assert resuming.wait(120) == 0, lines
        assert journal.resume_under_way(rid, resuming)
        assert journal.store.get_run(rid)["status"] == "ok"
    finally:
        journal.close()
    assert (tmp_path / "marked.txt").read_text() == "ran\n"
    assert lines[-1] == f"resume {rid} ended with exit code 0"
    assert journaled(RunOptions.from_journal(journal_options(tmp_path, rid))) == journaled(options)
