"""A damaged journal: a state database with a table dropped or renamed, a damaged page, a JSON
column that does not parse, a schema version it was not written with, a file cut short or
replaced. Every command that reads the journal must either work or say what is wrong with the
file (exit 2), never fail with an internal error (exit 70) or hang.

The base journal holds what the commands read: a sequential run with labels, a run paused for
approval, and a routed run (a replay fixture as the model). Each case copies it, damages the
copy and runs one command on it: in process for the commands that only read or answer
(``runs``, ``approvals``, ``approve``), in a subprocess for those that run plans again
(``resume``, ``replay``).

Shared by ``tests/test_fuzz.py`` (bounded) and ``scripts/fuzz_campaign.py`` (long).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import strategies as st

from conftest import APP

REGISTRY = f"""
version: 1
app_root: {json.dumps(str(APP))}
subagents:
  w:
    runner_defaults: {{tool_timeout_s: 5}}
    tools:
      echo:
        callable: testapp.tools:echo
        description: Returns its arguments.
        input_schema: {{type: object}}
        output_schema: {{}}
      gated:
        callable: testapp.tools:echo
        description: A write a person approves.
        effect: write
        approval: required
        input_schema: {{type: object}}
        output_schema: {{}}
"""


@dataclass
class Journal:
    """The base journal and what its runs are."""

    folder: Path  # holds reg.yml, the plans, the fixture and state/state.db
    runs: dict[str, str] = field(default_factory=dict)  # what -> run id
    columns: list[tuple[str, str]] = field(default_factory=list)  # (table, column)

    @property
    def db(self) -> Path:
        return self.folder / "state" / "state.db"


def make_journal(folder: Path) -> Journal:
    """Run the three plans in process into ``folder/state`` and keep the database, checkpointed."""
    from toolloop_cli.engine.run import RunOptions, execute_plan
    from toolloop_cli.plan.admit import admit_plan
    from toolloop_cli.store import Store

    journal = Journal(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "reg.yml").write_text(REGISTRY, encoding="utf-8")
    head = "version: 1\nregistry: reg.yml\nsubagent: w\n"
    (folder / "seq.yml").write_text(head + "mode: sequential\ncalls:\n  - {tool: echo, args: {a: 1}}\n"
                                    "  - {tool: echo, args: {b: [1, 2]}}\n", encoding="utf-8")
    (folder / "gated.yml").write_text(head + "mode: parallel\nmax_concurrency: 1\nlanes:\n"
                                      "  - {item_key: k1, calls: [{call_key: c, tool: gated, args: {x: 1}}]}\n",
                                      encoding="utf-8")
    answers = [("router", json.dumps({"action": "call", "tool": "echo", "args": {"q": 1}, "reason": "look"})),
               ("router", json.dumps({"action": "final", "reason": "done"})), ("final", json.dumps({"answer": 1}))]
    (folder / "fixture.jsonl").write_text("".join(json.dumps({
        "type": "model_answer", "n": n, "role": role, "model": "m", "text": text, "input_tokens": 3,
        "output_tokens": 2}) + "\n" for n, (role, text) in enumerate(answers, 1)), encoding="utf-8")
    profile = "{provider: replay, fixture: fixture.jsonl}"
    (folder / "routed.yml").write_text(head + f"mode: routed\ngoal: g\nallowed_tools: [echo]\nrouter_profile: {profile}\n"
                                       f"final_profile: {profile}\n"
                                       "budget: {max_iterations: 4, max_tokens: 1000, max_tool_calls: 2, timeout_s: 30}\n",
                                       encoding="utf-8")
    store = Store(folder / "state")
    try:
        for what, opts in (("seq", {"labels": {"team": "fuzz"}}), ("gated", {}), ("routed", {})):
            plan = admit_plan(folder / f"{what}.yml")
            result = execute_plan(plan, store, lambda _r: None, RunOptions(handle_signals=False, **opts))
            journal.runs[what] = result.summary["run_id"]
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        tables = [r[0] for r in store.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            for col in store.db.execute(f"PRAGMA table_info({table})"):
                journal.columns.append((table, col[1]))
    finally:
        store.close()
    return journal


# ---------------------------------------------------------------------------------------------
# damage

JUNK = ["", "{", "null", "[]", "\"x\"", "1", "{\"a\":", "NaN", "[" * 3000 + "]" * 3000, "{\"receipts\": 5}",
        "-1", "1e400", "99999999999999999999999", "\"\\ud800\"", "true"]


def damages(columns: list[tuple[str, str]]) -> st.SearchStrategy:
    """One damage to a journal with these (table, column) pairs."""
    tables = sorted({t for t, _ in columns})
    return st.one_of(
        st.tuples(st.just("drop"), st.sampled_from(tables)),
        st.tuples(st.just("rename"), st.sampled_from(tables)),
        st.tuples(st.just("column"), st.sampled_from(columns), st.one_of(st.sampled_from(JUNK), st.binary(max_size=8))),
        st.tuples(st.just("page"), st.integers(0, 40), st.integers(0, 4095), st.binary(min_size=1, max_size=64)),
        st.tuples(st.just("user_version"), st.sampled_from([-1, -(2 ** 31), 0, 3, 99, 2 ** 31 - 1])),
        st.tuples(st.just("truncate"), st.integers(0, 100)),
        st.tuples(st.just("replace"), st.sampled_from([b"", b"not a database", b"SQLite format 3\x00" + b"\xff" * 200])),
    )


def damage(db: Path, what: tuple) -> None:
    kind = what[0]
    if kind in ("page", "truncate", "replace"):
        data = bytearray(db.read_bytes())
        if kind == "page":
            at = min(what[1] * 4096 + what[2], max(len(data) - 1, 0))
            data[at:at + len(what[3])] = what[3]
        elif kind == "truncate":
            del data[len(data) * what[1] // 100:]
        else:
            data = bytearray(what[1])
        db.write_bytes(bytes(data))
        return
    con = sqlite3.connect(db, isolation_level=None)
    try:
        if kind == "drop":
            con.execute(f'DROP TABLE "{what[1]}"')
        elif kind == "rename":
            con.execute(f'ALTER TABLE "{what[1]}" RENAME TO "{what[1]}_old"')
        elif kind == "column":  # one row's value, as a disk or a hand could leave it
            (table, column), value = what[1], what[2]
            try:
                con.execute(f'UPDATE "{table}" SET "{column}" = ? WHERE rowid = (SELECT min(rowid) FROM "{table}")',
                            (value,))
            except sqlite3.IntegrityError:
                pass  # a key or NOT NULL column that cannot hold it: the copy stays whole
        elif kind == "user_version":
            con.execute(f"PRAGMA user_version = {what[1]}")
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        con.close()


# ---------------------------------------------------------------------------------------------
# commands

#: (name, arguments with {seq}/{gated}/{routed} for run ids, in process?)
COMMANDS = [
    ("runs list", ["runs", "list", "--format", "jsonl"], True),
    ("runs show", ["runs", "show", "{seq}", "--format", "jsonl"], True),
    ("runs show routed", ["runs", "show", "{routed}", "--format", "jsonl"], True),
    ("runs show --contract", ["runs", "show", "{seq}", "--contract"], True),
    ("runs export", ["runs", "export", "{routed}"], True),
    ("runs verify", ["runs", "verify", "{seq}"], True),
    ("runs prune", ["runs", "prune", "--keep", "1"], True),
    ("approvals list", ["approvals", "list", "--format", "jsonl"], True),
    ("approve", ["approve", "{gated}", "c", "--item", "k1", "--approve"], True),
    ("resume", ["resume", "{gated}", "--approve", "all", "--format", "jsonl"], False),
    ("replay", ["replay", "{routed}", "--format", "jsonl"], False),
]
IN_PROCESS = [c for c in COMMANDS if c[2]]


class InternalError(AssertionError):
    """What would be exit 70: an exception of toolloop's own, or exit code 70."""


def run_command(journal: Journal, state: Path, command: tuple, timeout: float = 120) -> int:
    """Run ``command`` against the journal in ``state``; its exit code. Raises ``InternalError``
    for what would be exit 70, and ``subprocess.TimeoutExpired`` for a hang."""
    _name, args, in_process = command
    args = [a.format(**journal.runs) for a in args]
    if in_process:
        from typer.testing import CliRunner

        from toolloop_cli.cli.app import app
        from toolloop_cli.errors import ConfigError, RunError, StateError, UsageError

        result = CliRunner().invoke(app, [*args, "--state-dir", str(state)], env={"NO_COLOR": "1"},
                                    catch_exceptions=True)
        exc = result.exception
        if exc is not None and not isinstance(exc, (SystemExit, UsageError, RunError, ConfigError, StateError)):
            raise InternalError(f"{' '.join(args[:2])}: {type(exc).__name__}: {str(exc)[:200]}") from exc
        code = {UsageError: 2, RunError: 1, ConfigError: 3, StateError: 2}.get(type(exc), result.exit_code)
    else:
        proc = subprocess.run([sys.executable, "-m", "toolloop_cli", *args, "--state-dir", str(state)],
                              cwd=journal.folder, capture_output=True, timeout=timeout, env=_env())
        code = proc.returncode
        if "Traceback" in proc.stderr.decode(errors="replace"):
            raise InternalError(f"{' '.join(args[:2])}: a traceback: {proc.stderr.decode(errors='replace')[-300:]}")
    if code == 70:
        raise InternalError(f"{' '.join(args[:2])}: exit 70")
    return code


def _env() -> dict:
    import os

    env = {**os.environ, "NO_COLOR": "1"}
    env.pop("TOOLLOOP_STATE_DIR", None)
    env.pop("TOOLLOOP_DEBUG", None)
    return env


def check_damaged_journal(journal: Journal, work: Path, what: tuple, command: tuple) -> int:
    """A copy of the base journal in ``work``, damaged by ``what``, read by ``command``."""
    state = work / "state"
    if state.exists():
        shutil.rmtree(state)
    state.mkdir(parents=True)
    shutil.copy(journal.db, state / "state.db")
    damage(state / "state.db", what)
    return run_command(journal, state, command)
