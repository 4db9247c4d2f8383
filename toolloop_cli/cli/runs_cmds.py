"""resume and runs list/show/verify: commands over the journal."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from .common import DataFormat, fail, holding_signals, print_findings, record_writer, resolve_format
from .run_cmds import EXECUTOR_HELP, RAY_ADDRESS_HELP, Placement

runs_app = typer.Typer(help="List journaled runs and show their receipts.", no_args_is_help=True)

STATE_DIR_HELP = "Folder of state.db (default .toolloop, or TOOLLOOP_STATE_DIR)."


def _open_store(state_dir: Optional[Path]):  # noqa: ANN202 - Store, imported lazily
    from ..store import Store, state_dir as pick

    return Store(pick(str(state_dir) if state_dir else None), create=False)


@holding_signals
def resume(
    run_id: str = typer.Argument(..., metavar="RUN_ID", help="Run id (a unique prefix is enough)."),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="Also re-run error, timeout and invalid_output calls and those skipped after them."),
    retry_interrupted: bool = typer.Option(False, "--retry-interrupted", help="Re-run writes that were in flight when the run died."),
    lanes: Optional[str] = typer.Option(None, "--lanes", metavar="FILE", help="The run's --lanes FILE again, to rebuild redacted arguments."),
    halt: Optional[str] = typer.Option(None, "--halt", metavar="POLICY", help="now,fail=N or soon,fail=P%: replaces the run's halt policy."),
    order: Optional[str] = typer.Option(None, "--order", metavar="input|completion", help="input or completion: the order receipts are printed in."),
    accept_contract_change: bool = typer.Option(False, "--accept-contract-change", help="Go on under a registry that changed since the run started (recorded; the summary says contract_changed)."),
    approve: Optional[str] = typer.Option(None, "--approve", metavar="ask|all|none", help="Approval gates: ask, all or none (default: what the run had)."),
    audit: Optional[Path] = typer.Option(None, "--audit", metavar="FILE", help="Write engine events as JSON Lines to this file."),
    format: DataFormat = typer.Option(DataFormat.auto, "--format", "-f", metavar="auto|table|jsonl|json", help="auto, table, jsonl or json."),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", metavar="DIR", help=STATE_DIR_HELP),
    executor: Optional[Placement] = typer.Option(None, "--executor", metavar="local|ray", help=EXECUTOR_HELP + " Default: the run's."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", metavar="ADDRESS", help=RAY_ADDRESS_HELP),
    raise_: Optional[List[str]] = typer.Option(None, "--raise", metavar="NAME=VALUE", help="Raise a budget of a routed run a budget paused, e.g. max_cost_usd=2.5 (repeatable; only upwards)."),
) -> None:
    """Finish an interrupted run; print the full receipt set in order, then the summary."""
    from .._login import login_name
    from ..engine.launch import Launch
    from ..engine.raises import parse_raises
    from ..errors import ConfigError
    from .running import start

    raises = parse_raises(raise_)

    policy = _halt_policy(halt)
    if order is not None and order not in ("input", "completion"):
        fail(f"--order {order!r}: use input or completion", 2)
    if approve is not None and approve not in ("ask", "all", "none"):
        fail(f"--approve {approve!r}: use ask, all or none", 2)
    launch = Launch(state_dir)
    try:
        prepared = launch.resume(run_id, retry_failed=retry_failed, retry_interrupted=retry_interrupted, lanes=lanes,
                                 accept_contract_change=accept_contract_change, halt=policy, order=order,
                                 approve=approve, executor=executor.value if executor else None,
                                 ray_address=ray_address, raises=raises, by=login_name() if raises else None)
    except ConfigError as exc:
        print_findings(exc.problems)
        sys.stderr.write(f"toolloop: run {launch.run_id} cannot be resumed; nothing ran\n")
        raise typer.Exit(3)
    if prepared.parent_run_id is not None:  # a child run resumed on its own: its parent still waits
        sys.stderr.write(f"toolloop: run {prepared.run_id} is a child run of {prepared.parent_run_id}; once it ends,"
                         f" its answer goes up with: toolloop resume {launch.top_run(prepared)}\n")
    start(launch, prepared, format, audit)


def _halt_policy(halt: Optional[str]):  # noqa: ANN202 - HaltPolicy, imported lazily
    if halt is None:
        return None
    from ..engine.launch import HaltPolicy

    try:
        return HaltPolicy.parse(halt)
    except ValueError as exc:
        fail(str(exc), 2)


@runs_app.command("list")
def list_runs(
    format: DataFormat = typer.Option(DataFormat.auto, "--format", "-f", metavar="auto|table|jsonl|json", help="auto, table, jsonl or json."),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", metavar="DIR", help=STATE_DIR_HELP),
    label: Optional[List[str]] = typer.Option(None, "--label", metavar="KEY=VALUE", help="Only runs with this KEY=VALUE label (repeatable; all must match)."),
) -> None:
    """Journaled runs, newest first: id, mode, status, counts, started."""
    from ..runview import run_record
    from .ops_cmds import parse_labels

    wanted = parse_labels(label)
    store = _open_store(state_dir)
    fmt = resolve_format(format, sys.stdout)
    writer = record_writer(fmt, sys.stdout.buffer)
    try:
        listed = 0
        for run in store.list_runs(wanted):
            writer.write(run_record(store, run))
            listed += 1
        writer.close()
        if fmt == "table" and not listed:  # an empty table would say nothing at all
            from .._text import escape
            from .common import notice

            notice("no run has " + escape(" and ".join(label or [])) if wanted else "no runs in this journal yet")
    except BrokenPipeError:
        _quiet_stdout()
    finally:
        store.close()


@runs_app.command("show")
def show_run(
    run_id: str = typer.Argument(..., metavar="RUN_ID", help="Run id (a unique prefix is enough)."),
    format: DataFormat = typer.Option(DataFormat.auto, "--format", "-f", metavar="auto|table|jsonl|json", help="auto, table, jsonl or json."),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", metavar="DIR", help=STATE_DIR_HELP),
    contract: bool = typer.Option(False, "--contract", help="Print the contract the run used (stored with it) instead, as JSON."),
) -> None:
    """The receipts of a run again, in order, then the calls waiting for approval and the
    notifications sent about it, then its summary (byte for byte what the run printed as JSON
    Lines, for a finished run without notifications)."""
    from ..engine.resume import find_run
    from ..pending import pending_records
    from ..runview import printed_records, shown_status

    store = _open_store(state_dir)
    try:
        run = find_run(store, run_id)
        if contract:
            from .ops_cmds import print_contract

            return print_contract(store, run)
        receipts = printed_records(store, run)
        status = shown_status(run)
        waiting = pending_records(store, run["run_id"])
        told = store.notifications_of(run["run_id"])
    finally:
        store.close()
    writer = record_writer(resolve_format(format, sys.stdout), sys.stdout.buffer)
    try:
        for rec in receipts:
            writer.write(rec)
        for rec in waiting:  # calls waiting for a person, before the summary
            writer.write(rec)
        for rec in told:  # who was told about the run (notify), before the summary
            writer.write(rec)
        if run["summary"]:
            writer.write(run["summary"])
        writer.close()
    except BrokenPipeError:
        _quiet_stdout()
        raise typer.Exit(141)
    if not run["summary"]:
        sys.stderr.write(f"toolloop: run {run['run_id']} is {status} and has no summary yet"
                         f"{'; resume with: toolloop resume ' + run['run_id'] if status == 'interrupted' else ''}\n")


def verify(
    run_id: str = typer.Argument(..., metavar="RUN_ID", help="Run id (a unique prefix is enough)."),
    expect: Optional[str] = typer.Option(None, "--expect", metavar="SHA256", help="A chain_sha256 kept elsewhere (printed when the run, or an earlier session of it, ended): the chain must pass through it."),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", metavar="DIR", help=STATE_DIR_HELP),
) -> None:
    """Recompute the hash chain over a run's records; exit 1 naming the first record that does not match."""
    import re

    from ..chain import verify_run
    from ..engine.resume import find_run

    if expect is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", expect):
        fail("--expect takes a SHA-256 in hex (64 characters), the chain_sha256 of one of the run's summaries", 2)
    store = _open_store(state_dir)
    try:
        run = find_run(store, run_id)
        verdict = verify_run(store, run, expect=expect.lower() if expect else None)
    finally:
        store.close()
    rid = run["run_id"]
    if verdict is None:
        fail(f"run {rid} has no hash chain: it was journaled by a toolloop without tamper evidence", 1)
    if not verdict.ok:
        fail(f"run {rid}: the journal does not match its hash chain: {verdict.problem}", 1,
             "the journal was changed after it was written; compare it with a copy of the run's output")
    shown = f", head {verdict.head}" if verdict.head else ""
    sys.stdout.write(f"run {rid}: hash chain holds ({verdict.links} link{'s' if verdict.links != 1 else ''}{shown})"
                     + (f"; --expect is link {verdict.expected_at}" if verdict.expected_at is not None else "")
                     + "\n")


def _quiet_stdout() -> None:
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
