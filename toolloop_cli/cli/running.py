"""What a command that runs a plan (run, call, resume, replay) shows while the run goes and when it
ends: records on standard output in the chosen format, live progress and the approval prompt on a
terminal, the audit file, and the lines that say how the run ended and what to do next. The run
itself is the engine's (``engine/launch.py``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import IO, Any, Optional

import typer

from .common import DataFormat, err_console, fail, notice, print_findings, record_writer, resolve_format

#: at most this many paused calls get a line of their own on standard error
PAUSED_NOTICES = 5


def private_stdout() -> IO[bytes]:
    """Keep standard output for records only: our writer gets a private copy of fd 1, and fd 1
    itself (and sys.stdout) is pointed at standard error, so a tool that prints cannot corrupt
    the JSON Lines stream."""
    from . import common

    if common.STDOUT_CLOSED:
        fail("standard output is closed; nothing ran (give the run somewhere to write its records)", 1)
    sys.stdout.flush()
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(fd, "wb", buffering=1 << 16)


class Output:
    """Writes records in the chosen format; tolerates the reader going away. The run's sink."""

    def __init__(self, fmt: DataFormat):
        self.fmt = resolve_format(fmt, sys.stdout)
        self.stream = private_stdout()
        self.writer = record_writer(self.fmt, self.stream)
        if self.fmt == "jsonl":
            self.writer.autoflush = False  # flushed once per batch of committed receipts (flush)
        self.broken = False

    def _guarded(self, action: Any, *args: Any, reraise: bool = True) -> None:
        if self.broken:
            return
        try:
            action(*args)
        except BrokenPipeError:
            self.broken = True  # nothing more is written once the reader is gone
            if reraise:
                raise

    def write(self, record: dict, line: bytes | None = None) -> None:
        self._guarded(self.writer.write, record, line)

    def flush(self) -> None:
        self._guarded(self.writer.flush)

    def close(self) -> None:
        self._guarded(self.writer.close, reraise=False)


class _Shown:
    """The sink with live progress in front: each record is seen by the progress display first."""

    def __init__(self, out: Output, progress: Any):
        self.out, self.progress = out, progress

    def write(self, record: dict, line: bytes | None = None) -> None:
        self.progress.see(record)
        self.out.write(record, line)

    def flush(self) -> None:
        self.out.flush()


def quiet_broken_pipe() -> None:
    # Point the private stream at /dev/null so interpreter shutdown does not complain.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)


def open_store(launch: Any, create: bool = True) -> None:
    """The launch's store, opened before anything is written (a signal then ends the command)."""
    try:
        launch.open(create=create)
    except KeyboardInterrupt:
        fail("interrupted before the run started; nothing ran", 130)


def _audit_file(audit: Optional[Path]) -> Any:
    if audit is None:
        return None
    try:
        return open(audit, "ab")
    except OSError as exc:
        fail(f"cannot write --audit {audit}: {exc.strerror}", 2)


def _display(out: Output, prepared: Any) -> tuple[Any, Any, dict]:
    """Live progress when it is wanted: the sink the run writes to, the display, and its hooks."""
    from .run_checks import progress_wanted

    if not progress_wanted(out):
        return out, None, {}
    plan = prepared.plan
    if plan.routed is not None:  # no known total: turns, calls and tokens against the budget
        from ..render.live import RoutedProgress

        progress = RoutedProgress(err_console(), plan.routed.budget)
        return _Shown(out, progress), progress, {}
    from ..render.live import LiveProgress

    progress = LiveProgress(err_console(), plan.total_calls, plan.mode)
    return out, progress, {"on_receipt": lambda r: progress.advance(r.status)}


def start(launch: Any, prepared: Any, format: DataFormat, audit: Optional[Path] = None) -> Any:
    """Run ``prepared`` through ``launch`` with records on standard output, then say how it ended.
    Returns the result of a replay (its caller sets the exit code); otherwise exits with the run's."""
    open_store(launch)
    out = Output(format)
    audit_file = _audit_file(audit)
    sink, progress, hooks = _display(out, prepared)
    if audit_file is not None:
        from ..render.records import JsonlWriter

        hooks["audit"] = JsonlWriter(audit_file).write
    if prepared.options.approve == "ask" and sys.stdin.isatty() and sys.stderr.isatty():
        from .prompt import TerminalApprover

        hooks["ask"] = TerminalApprover(progress)
    hooks.update(on_rejected=print_findings, on_signal=notice, on_warning=lambda text: notice(f"warning: {text}"))
    try:
        if progress is not None:
            with progress:
                result = launch.start(prepared, sink, **hooks)
        else:
            result = launch.start(prepared, sink, **hooks)
        out.close()
        reasons = _taint_gates(launch, result)
    except BrokenPipeError:
        quiet_broken_pipe()
        raise typer.Exit(141)
    except KeyboardInterrupt:  # only outside the run's own signal handling (e.g. not the main thread)
        notice("interrupted; the journal holds every receipt written so far")
        raise typer.Exit(130)
    finally:
        if audit_file is not None:
            try:
                audit_file.close()
            except OSError:
                pass  # the run already said the audit file cannot be written
        launch.close()
    tell_ending(result, reasons)
    if prepared.recording is not None:
        return result  # the caller sets the exit code (replay: on divergence alone)
    raise typer.Exit(result.exit_code)


def _taint_gates(launch: Any, result: Any) -> dict:
    """What gated each call of a paused run that waits at a taint gate, as ``approvals list`` says
    it ("after untrusted content from TOOL at turn N"); nothing to read for a run never tainted."""
    summary = result.summary
    if summary.get("status") != "stopped" or not summary.get("tainted_by") or not result.state.paused:
        return {}
    from ..pending import pending_records

    return {(r["item_key"], r["call_key"]): r["reason"] for r in pending_records(launch.open(create=False), summary["run_id"])
            if r.get("taint")}


def tell_ending(result: Any, reasons: dict | None = None) -> None:
    """The lines on standard error that say how a run ended, when it did not simply finish: why a
    routed run did not answer, how to resume, which calls wait for approval (and, at a taint gate,
    why: ``reasons``) and how to answer them."""
    summary = result.summary
    error = summary.get("error")
    if isinstance(error, dict):  # a routed run that did not answer says why, as one line
        from .._text import escape

        notice(f"run {summary['run_id']} ended {error['kind']}: {escape(error['message'])}")
    if summary["status"] == "interrupted":
        notice(f"interrupted; resume with: toolloop resume {summary['run_id']}")
    elif summary["status"] == "stopped":
        budget = _budget_out(summary.get("paused_by"))
        if budget is None:  # a child paused by its budget waits for a raise, not an approval
            _tell_paused(summary["run_id"], result.state.paused, reasons or {})
        if budget is not None:  # a budget ran out: only a raise of it lets the run go on
            name, used = budget
            notice(f"paused: the budget {name} ran out (used {used}); resume with:"
                   f" toolloop resume {summary['run_id']} --raise {name}=VALUE")
        else:
            notice(f"stopped early; resume with: toolloop resume {summary['run_id']}")


def _budget_out(paused_by: Any) -> tuple[str, Any] | None:
    """The budget (and its use) that paused a run, its own or down its paused child runs."""
    while isinstance(paused_by, dict):
        if paused_by.get("kind") == "budget":
            return str(paused_by.get("budget")), (paused_by.get("used") or {}).get(paused_by.get("budget"))
        paused_by = paused_by.get("child")
    return None


def _tell_paused(rid: str, paused: list, reasons: dict) -> None:
    from .._text import escape
    from ..engine.notify import approve_command  # the one builder of the line (notifications carry it too)

    if len(paused) > PAUSED_NOTICES:  # many gated calls: one line, and where to see them all
        notice(f"{len(paused)} calls wait for approval: toolloop approvals list {rid};"
               f" answer them all with toolloop approve {rid} --all-pending --approve|--reject")
        return
    for item_key, call_key, child_run_id in paused:
        where = f"call {call_key}{f' (lane {item_key})' if item_key else ''}"
        if child_run_id is not None:
            notice(f"{where} runs child run {child_run_id}, which waits: see toolloop approvals list {child_run_id}")
            continue
        reason = reasons.get((item_key, call_key))
        why = f" ({escape(reason)})" if reason else ""
        notice(f"{where} waits for approval{why}: {approve_command(rid, call_key, item_key, '--approve|--reject')}")
