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
    run_id: str = typer.Argument(..., metavar="RUN_ID", help="Run id of a routed run (a unique prefix is enough)."),
    offline: bool = typer.Option(False, "--offline", help="Take every tool result from the recording: run no tool and no model."),
    execute_writes: bool = typer.Option(False, "--execute-writes", help="Run write and destructive tools again too (in a fork: from turn N on)."),
    from_turn: Optional[int] = typer.Option(None, "--from", metavar="N", min=1, help="Fork: take the recorded turns before N, then go on live as a new run."),
    plan: Optional[Path] = typer.Option(None, "--plan", metavar="FILE", help="With --from: the plan the fork goes on with (default: the run's plan file as it is now)."),
    format: DataFormat = typer.Option(DataFormat.auto, "--format", "-f", metavar="auto|table|jsonl|json", help="auto, table, jsonl or json."),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", metavar="DIR", help=STATE_DIR_HELP),
) -> None:
    """Re-run a routed run from its recorded model answers and report what differs (exit 1), or fork it with --from N."""
    from ..engine.launch import Launch
    from ..errors import ConfigError
    from .common import print_findings, require_file
    from .running import start

    if from_turn is None and plan is not None:
        fail("--plan is for a fork: give --from N too", 2)
    if from_turn is not None and offline:
        fail("--offline replays a run whole; a fork (--from N) goes on live from turn N", 2)
    if plan is not None:
        require_file(plan, "--plan")
    launch = Launch(state_dir)
    try:
        if from_turn is not None:
            prepared = launch.fork(run_id, from_turn, plan=plan, execute_writes=execute_writes)
        else:
            prepared = launch.replay(run_id, offline=offline, execute_writes=execute_writes)
    except ConfigError as exc:
        print_findings(exc.problems)
        doing = "forked" if from_turn is not None else "replayed"
        sys.stderr.write(f"toolloop: run {launch.run_id} cannot be {doing}; nothing ran\n")
        raise typer.Exit(3)
    result = start(launch, prepared, format)
    if from_turn is not None:  # a fork is a run: it exits as one
        sys.stderr.write(f"toolloop: fork of {launch.run_id} from turn {from_turn} as {result.summary['run_id']}\n")
        raise typer.Exit(result.exit_code)
    diffs = launch.replay_differences(prepared, result)
    for line in diffs:
        sys.stderr.write(f"toolloop: replay differs: {line}\n")
    sys.stderr.write(f"toolloop: replay of {launch.run_id} as {result.summary['run_id']}: "
                     f"{'no difference' if not diffs else f'{len(diffs)} difference(s)'}\n")
    raise typer.Exit(1 if diffs else 0)


def export(
    run_id: str = typer.Argument(..., metavar="RUN_ID", help="Run id (a unique prefix is enough)."),
    format: DataFormat = typer.Option(DataFormat.jsonl, "--format", "-f", metavar="auto|table|jsonl|json", help="jsonl (default) or json."),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", metavar="DIR", help=STATE_DIR_HELP),
) -> None:
    """A run's manifest, model answers and records as JSON Lines: a replay fixture as it is."""
    from ..engine.replay import export_records
    from ..engine.resume import find_run

    store = _open_store(state_dir)
    try:
        records = export_records(store, find_run(store, run_id))
    finally:
        store.close()
    fmt = resolve_format(format, sys.stdout)
    if fmt == "table":
        fail("runs export writes records: use --format jsonl or json", 2)
    writer = record_writer(fmt, sys.stdout.buffer)
    try:
        for rec in records:
            writer.write(rec)
        writer.close()
    except BrokenPipeError:
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        raise typer.Exit(141)


def _control(run_id: str, kind: str, message: Optional[str], state_dir: Optional[Path]) -> None:
    """Record a steer or abort, and say what it will do, or did if the run finished meanwhile."""
    from ..engine.resume import find_run

    store = _open_store(state_dir)
    try:
        run = find_run(store, run_id)
        rid = run["run_id"]
        if kind == "steer" and run["mode"] != "routed":
            fail(f"run {rid} is a {run['mode']} run; steer is for routed runs (abort stops any run)", 2)
        if run["status"] not in ("running", "stopped"):
            fail(f"run {rid} has already finished ({_ending(run)}); the {kind} was not recorded", 1)
        n = store.add_control(rid, kind, message)
        after = store.get_run(rid) or run
        read_at = next((c[3] for c in store.controls_after(rid, n) if c[0] == n), None)
    finally:
        store.close()
    if after["status"] not in ("running", "stopped"):  # it finished while the control was written
        _finished_meanwhile(after, kind, read_at)
    sys.stderr.write(f"{kind} recorded for run {rid}: {_what_happens(run, kind)}\n")


def _ending(run: dict) -> str:
    summary = run.get("summary") if isinstance(run.get("summary"), dict) else {}
    outcome = summary.get("outcome") if summary else None
    return f"{run['status']}, outcome {outcome}" if outcome else run["status"]


def _what_happens(run: dict, kind: str) -> str:
    rid = run["run_id"]
    if run["mode"] != "routed":
        if run["status"] == "stopped":
            return f"the run is stopped; toolloop resume {rid} reads it and stops it again at once"
        return "the running batch stops at once, as --halt now would (resumable)"
    if run["status"] == "stopped":
        if kind == "steer":
            return f"the run is paused; the model is shown it on the first turn after toolloop resume {rid}"
        return f"the run is paused; toolloop resume {rid} reads it and ends the run aborted"
    if kind == "steer":
        return ("the running loop shows it to the model at its next turn; if the router has had its last turn,"
                " a supervisor record says the steer came too late")
    return ("the running loop reads it before its next model request (a call running then is cancelled) and ends"
            " aborted; if the run has already made its last model request, it ends as it would have and a"
            " supervisor record says the abort came too late")


def _finished_meanwhile(run: dict, kind: str, read_at: Optional[int]) -> None:
    rid = run["run_id"]
    summary = run.get("summary") if isinstance(run.get("summary"), dict) else {}
    if kind == "abort" and read_at is not None and (summary or {}).get("outcome") == "aborted":
        sys.stderr.write(f"abort recorded for run {rid}: the run read it and ended aborted\n")
        return
    if read_at is not None:
        fail(f"run {rid} read the {kind} after its last model request and finished ({_ending(run)}) as it would"
             " have; a supervisor record says it came too late", 1)
    fail(f"run {rid} finished ({_ending(run)}) before it read the {kind}; nothing changed", 1)


def steer(
    run_id: str = typer.Argument(..., metavar="RUN_ID", help="Run id of a routed run (a unique prefix is enough)."),
    message: str = typer.Argument(..., metavar="MESSAGE", help="What the model is told at its next turn."),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", metavar="DIR", help=STATE_DIR_HELP),
) -> None:
    """Add a message to a routed run's next turn (read from the journal by the running loop)."""
    _control(run_id, "steer", message, state_dir)


def abort(
    run_id: str = typer.Argument(..., metavar="RUN_ID", help="Run id (a unique prefix is enough)."),
    message: Optional[str] = typer.Option(None, "--message", metavar="TEXT", help="Why; kept in the run's supervisor record."),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", metavar="DIR", help=STATE_DIR_HELP),
) -> None:
    """Stop a run: a routed loop ends aborted; a batch stops as --halt now would (resumable)."""
    _control(run_id, "abort", message, state_dir)
