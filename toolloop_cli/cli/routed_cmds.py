"""replay and runs export: commands over recorded routed runs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from .common import DataFormat, fail, holding_signals, record_writer, resolve_format

STATE_DIR_HELP = "Folder of state.db (default .toolloop, or TOOLLOOP_STATE_DIR)."


def _open_store(state_dir: Optional[Path]):  # noqa: ANN202 - Store, imported lazily
    from ..store import Store, state_dir as pick

    return Store(pick(str(state_dir) if state_dir else None), create=False)


@holding_signals
def replay(
    run_id: str = typer.Argument(..., help="Run id of a routed run (a unique prefix is enough)."),
    offline: bool = typer.Option(False, "--offline", help="Take every tool result from the recording: run no tool and no model."),
    execute_writes: bool = typer.Option(False, "--execute-writes", help="Run write and destructive tools again too."),
    format: DataFormat = typer.Option(DataFormat.auto, "--format", "-f", help="auto, table, jsonl or json."),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", help=STATE_DIR_HELP),
) -> None:
    """Re-run a routed run from its recorded model answers and report what differs (exit 1)."""
    from ..engine.replay import differences, prepare_replay, recorded_records
    from ..engine.resume import find_run
    from ..errors import ConfigError
    from .common import print_findings
    from .run_cmds import _execute

    store = _open_store(state_dir)
    try:
        run = find_run(store, run_id)
        recorded = recorded_records(store, run)
        try:
            plan, recording = prepare_replay(store, run, offline=offline, execute_writes=execute_writes)
        except ConfigError as exc:
            print_findings(exc.problems)
            sys.stderr.write(f"toolloop: run {run['run_id']} cannot be replayed; nothing ran\n")
            raise typer.Exit(3)
    finally:
        store.close()
    opts = run["options"] or {}
    result = _execute(plan, format, None, opts.get("default_timeout_s"), True, False, state_dir, None,
                      opts.get("output_cap_bytes") or 16 * 1024 * 1024, approve="none", replay=recording)
    store = _open_store(state_dir)
    try:
        new_run = store.get_run(result.summary["run_id"])
        diffs = differences(recorded, recorded_records(store, new_run))
    finally:
        store.close()
    for line in diffs:
        sys.stderr.write(f"toolloop: replay differs: {line}\n")
    sys.stderr.write(f"toolloop: replay of {run['run_id']} as {result.summary['run_id']}: "
                     f"{'no difference' if not diffs else f'{len(diffs)} difference(s)'}\n")
    raise typer.Exit(1 if diffs else 0)


def export(
    run_id: str = typer.Argument(..., help="Run id (a unique prefix is enough)."),
    format: DataFormat = typer.Option(DataFormat.jsonl, "--format", "-f", help="jsonl (default) or json."),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", help=STATE_DIR_HELP),
) -> None:
    """A run's records and model answers as JSON Lines: a replay fixture as it is."""
    from ..engine.replay import recorded_records
    from ..engine.resume import find_run

    store = _open_store(state_dir)
    try:
        run = find_run(store, run_id)
        records = recorded_records(store, run)
        answers = store.model_answers_of(run["run_id"])
    finally:
        store.close()
    fmt = resolve_format(format, sys.stdout)
    if fmt == "table":
        fail("runs export writes records: use --format jsonl or json", 2)
    writer = record_writer(fmt, sys.stdout.buffer)
    try:
        for rec in answers + records:
            writer.write(rec)
        writer.close()
    except BrokenPipeError:
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        raise typer.Exit(141)


def _control(run_id: str, kind: str, message: Optional[str], state_dir: Optional[Path]) -> None:
    from ..engine.resume import find_run

    store = _open_store(state_dir)
    try:
        run = find_run(store, run_id)
        if kind == "steer" and run["mode"] != "routed":
            fail(f"run {run['run_id']} is a {run['mode']} run; steer is for routed runs (abort stops any run)", 2)
        if run["status"] not in ("running", "stopped"):
            fail(f"run {run['run_id']} has ended ({run['status']}); there is nothing to {kind}", 1)
        store.add_control(run["run_id"], kind, message)
    finally:
        store.close()
    when = "before its next turn" if run["mode"] == "routed" else "at once"
    sys.stderr.write(f"{kind} recorded for run {run['run_id']}: a running run reads it {when}, a paused one on resume\n")


def steer(
    run_id: str = typer.Argument(..., help="Run id of a routed run (a unique prefix is enough)."),
    message: str = typer.Argument(..., help="What the model is told at its next turn."),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", help=STATE_DIR_HELP),
) -> None:
    """Add a message to a routed run's next turn (read from the journal by the running loop)."""
    _control(run_id, "steer", message, state_dir)


def abort(
    run_id: str = typer.Argument(..., help="Run id (a unique prefix is enough)."),
    message: Optional[str] = typer.Option(None, "--message", help="Why; kept in the run's supervisor record."),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", help=STATE_DIR_HELP),
) -> None:
    """Stop a run: a routed loop ends aborted; a batch stops as --halt now would (resumable)."""
    _control(run_id, "abort", message, state_dir)
