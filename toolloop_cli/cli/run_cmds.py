"""run and call: executing plans and single calls."""

from __future__ import annotations

import os
import sys
import time
from enum import Enum
from pathlib import Path
from typing import IO, Any, List, Optional

import typer

from .common import (DataFormat, err_console, fail, holding_signals, notice, print_findings, record_writer,
                     resolve_format, require_file)


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


#: at most this many paused calls get a line of their own on standard error
PAUSED_NOTICES = 5


class Order(str, Enum):
    input = "input"
    completion = "completion"


class Approve(str, Enum):
    ask = "ask"
    all = "all"
    none = "none"


class Placement(str, Enum):
    local = "local"
    ray = "ray"


EXECUTOR_HELP = "Where calls of callables run: local (this process and its workers) or ray (tasks on a Ray cluster)."
RAY_ADDRESS_HELP = ("Ray cluster to run on with --executor ray (default RAY_ADDRESS; with neither, a local Ray is"
                    " started for the run).")


class Output:
    """Writes records in the chosen format; tolerates the reader going away."""

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

    def write(self, record: dict) -> None:
        self._guarded(self.writer.write, record)

    def flush(self) -> None:
        self._guarded(self.writer.flush)

    def close(self) -> None:
        self._guarded(self.writer.close, reraise=False)


def quiet_broken_pipe() -> None:
    # Point the private stream at /dev/null so interpreter shutdown does not complain.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)


@holding_signals
def run(
    plan: Path = typer.Argument(..., metavar="PLAN", help="Plan YAML file."),
    registry: Optional[Path] = typer.Option(None, "--registry", metavar="FILE", help="Registry file (overrides the plan's)."),
    app_root: Optional[Path] = typer.Option(None, "--app-root", metavar="DIR", help="Folder put first on sys.path for callables."),
    max_concurrency: Optional[int] = typer.Option(None, "--max-concurrency", "-j", metavar="N", help="Lanes run at once (parallel plans)."),
    lanes: Optional[str] = typer.Option(None, "--lanes", metavar="FILE|-", help="JSON Lines file of extra lanes, or - for standard input."),
    format: DataFormat = typer.Option(DataFormat.auto, "--format", "-f", metavar="auto|table|jsonl|json", help="auto, table, jsonl or json."),
    halt: Optional[str] = typer.Option(None, "--halt", metavar="POLICY", help="now,fail=N or soon,fail=P%: stop the batch after failures."),
    timeout: Optional[float] = typer.Option(None, "--timeout", metavar="SECONDS", help="Default timeout in seconds for tools that set none."),
    approve: Approve = typer.Option(Approve.ask, "--approve", metavar="ask|all|none", help="Approval gates: ask (the run pauses for 'toolloop approve'), all, or none."),
    stream: bool = typer.Option(False, "--stream", help="With --lanes: admit each lane just before it starts; a rejected lane gets invalid_input receipts."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Admit the plan and show what would run; run nothing."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read the cache."),
    refresh_cache: bool = typer.Option(False, "--refresh-cache", help="Run cacheable tools and rewrite their entries."),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", metavar="DIR", help="Folder of state.db (default .toolloop, or TOOLLOOP_STATE_DIR)."),
    audit: Optional[Path] = typer.Option(None, "--audit", metavar="FILE", help="Write engine events as JSON Lines to this file."),
    max_output_bytes: int = typer.Option(16 * 1024 * 1024, "--max-output-bytes", metavar="BYTES", help="Largest result accepted from a call."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Live progress on standard error when it is a terminal."),
    order: Order = typer.Option(Order.input, "--order", metavar="input|completion", help="input: receipts in input order (the default); completion: each as soon as it is committed."),
    executor: Placement = typer.Option(Placement.local, "--executor", metavar="local|ray", help=EXECUTOR_HELP),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", metavar="ADDRESS", help=RAY_ADDRESS_HELP),
    label: Optional[List[str]] = typer.Option(None, "--label", metavar="KEY=VALUE", help="KEY=VALUE attached to the run (repeatable): in the summary, audit events and telemetry."),
) -> None:
    """Run a plan; print one receipt per call, in input order, then a summary."""
    from ..engine.runstate import HaltPolicy
    from ..errors import ConfigError
    from ..plan.admit import admit_plan
    from .ops_cmds import parse_labels

    started = time.perf_counter()
    labels = parse_labels(label)
    require_file(plan, "plan")
    if timeout is not None and timeout <= 0:
        fail("--timeout must be above 0", 2)
    if max_concurrency is not None and max_concurrency < 1:
        fail(f"-j/--max-concurrency {max_concurrency}: at least one lane must run at a time", 2,
             "use 1 or more (e.g. -j 4), or leave it out to use the plan's max_concurrency")
    policy = None
    if halt is not None:
        try:
            policy = HaltPolicy.parse(halt)
        except ValueError as exc:
            fail(str(exc), 2)
    if stream and lanes is None:
        fail("--stream needs --lanes FILE or --lanes -", 2)
    if stream and dry_run:
        fail("--stream and --dry-run do not go together: a streamed lane is admitted only when it runs", 2)
    from .run_checks import lanes_refusal, set_progress, write_rejected_summary

    set_progress(progress)
    if lanes is not None and (refusal := lanes_refusal(plan)):
        fail(refusal, 2, "remove --lanes, or make the plan 'mode: parallel'")
    lanes_stream: Any = None
    if lanes is not None:
        if lanes == "-":
            lanes_stream = sys.stdin.buffer
        else:
            try:
                lanes_stream = open(lanes, "rb")
            except OSError as exc:
                fail(f"cannot read --lanes {lanes}: {exc.strerror}", 2)
    store = spool = run_id = None
    if lanes_stream is not None and not dry_run and not stream:
        # lanes from a stream go to the journal as they are admitted (bounded memory)
        from ..engine.session import new_run_id
        from ..engine.spool import LaneSpool

        store = _open_store(state_dir)
        run_id = new_run_id()
        spool = LaneSpool(store, run_id)
    try:
        from ..contract.mcp import discovered

        # the plan's MCP servers are listed first (a step of its own), then the plan admitted
        admitted = discovered(lambda servers: admit_plan(
            plan, registry=str(registry) if registry else None, app_root=str(app_root) if app_root else None,
            max_concurrency=max_concurrency, lanes=lanes_stream, lanes_name=lanes or "-",
            default_timeout_s=timeout, spool=spool, stream=stream, placement=executor.value, servers=servers,
        ))
    except ConfigError as exc:
        if spool is not None:
            spool.discard()
            store.close()
        print_findings(exc.problems)
        sys.stderr.write(f"toolloop: plan rejected ({sum(p.level == 'error' for p in exc.problems)} error(s)); nothing ran\n")
        write_rejected_summary(format, plan, started, executor=executor.value)
        raise typer.Exit(3)
    finally:
        if lanes_stream is not None and lanes_stream is not sys.stdin.buffer and not stream:
            lanes_stream.close()
    if admitted.warnings:
        from ..lint.suppress import Suppressor, load_settings

        try:  # warnings the registry accepts (inline or pyproject.toml ignores) are not repeated by run
            settings = load_settings()
            shown = Suppressor(settings.ignore).keep(admitted.warnings)
        except Exception:  # noqa: BLE001 - a bad pyproject setting is validate's to report
            shown = admitted.warnings
        print_findings(shown)
    if dry_run:
        from ..engine.dryrun import dry_run_records

        out = Output(format)
        try:
            for rec in dry_run_records(admitted, timeout):
                out.write(rec)
            out.close()
        except BrokenPipeError:
            quiet_broken_pipe()
        return
    _execute(admitted, format, policy, timeout, no_cache, refresh_cache, state_dir, audit, max_output_bytes,
             run_id=run_id, store=store, approve=approve.value, order=order.value, executor=executor.value,
             ray_address=ray_address, labels=labels)


def _open_store(state_dir: Optional[Path]) -> Any:
    from ..store import Store, state_dir as pick_state_dir

    try:
        return Store(pick_state_dir(str(state_dir) if state_dir else None))
    except KeyboardInterrupt:
        fail("interrupted before the run started; nothing ran", 130)


def _execute(admitted: Any, format: DataFormat, policy: Any, timeout: Optional[float], no_cache: bool,
             refresh_cache: bool, state_dir: Optional[Path], audit: Optional[Path], max_output_bytes: int,
             resume: Optional[dict] = None, run_id: Optional[str] = None, store: Any = None,
             approve: str = "ask", replay: Any = None, order: str = "input", executor: str = "local",
             ray_address: Optional[str] = None, labels: Optional[dict] = None) -> Any:
    from ..engine.run import RunOptions, execute_plan
    from .run_checks import progress_wanted

    if store is None:
        store = _open_store(state_dir)
    out = Output(format)
    audit_sink = None
    audit_file = None
    if audit is not None:
        from ..render.records import JsonlWriter

        try:
            audit_file = open(audit, "ab")
        except OSError as exc:
            fail(f"cannot write --audit {audit}: {exc.strerror}", 2)
        audit_sink = JsonlWriter(audit_file).write
    options = RunOptions(approve=approve, flush_output=out.flush, on_rejected=print_findings, halt=policy, default_timeout_s=timeout, no_cache=no_cache, refresh_cache=refresh_cache,
                         output_cap_bytes=max_output_bytes, audit=audit_sink, on_signal=notice,
                         on_warning=lambda text: notice(f"warning: {text}"), order=order, executor=executor,
                         ray_address=ray_address, labels=labels)
    progress: Any = None
    emit = out.write
    if progress_wanted(out):
        if admitted.routed is not None:  # no known total: turns, calls and tokens against the budget
            from ..render.live import RoutedProgress

            progress = RoutedProgress(err_console(), admitted.routed.budget)

            def emit(record: dict) -> None:
                progress.see(record)
                out.write(record)
        else:
            from ..render.live import LiveProgress

            progress = LiveProgress(err_console(), admitted.total_calls, admitted.mode)
            options.on_receipt = lambda r: progress.advance(r.status)
    if approve == "ask" and sys.stdin.isatty() and sys.stderr.isatty():
        from .prompt import TerminalApprover

        options.ask = TerminalApprover(progress)
    try:
        if progress is not None:
            with progress:
                result = execute_plan(admitted, store, emit, options, resume=resume, run_id=run_id, replay=replay)
        else:
            result = execute_plan(admitted, store, emit, options, resume=resume, run_id=run_id, replay=replay)
        out.close()
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
        store.close()
    error = result.summary.get("error")
    if isinstance(error, dict):  # a routed run that did not answer says why, as one line
        from .._text import escape

        notice(f"run {result.summary['run_id']} ended {error['kind']}: {escape(error['message'])}")
    if result.summary["status"] == "interrupted":
        notice(f"interrupted; resume with: toolloop resume {result.summary['run_id']}")
    elif result.summary["status"] == "stopped":
        rid = result.summary["run_id"]
        paused = result.state.paused
        if len(paused) > PAUSED_NOTICES:  # many gated calls: one line, and where to see them all
            notice(f"{len(paused)} calls wait for approval: toolloop approvals list {rid};"
                   f" answer them all with toolloop approve {rid} --all-pending --approve|--reject")
            paused = []
        for item_key, call_key, child_run_id in paused:
            where = f"call {call_key}{f' (lane {item_key})' if item_key else ''}"
            if child_run_id is not None:
                notice(f"{where} runs child run {child_run_id}, which waits: see toolloop approvals list {child_run_id}")
                continue
            notice(f"{where} waits for approval: "
                   f"toolloop approve {rid} {call_key}{f' --item {item_key}' if item_key else ''} --approve|--reject")
        notice(f"stopped early; resume with: toolloop resume {rid}")
    if replay is not None:
        return result  # the caller sets the exit code (replay: on divergence alone)
    raise typer.Exit(result.exit_code)


@holding_signals
def call(
    registry: Path = typer.Argument(..., metavar="REGISTRY", help="Registry YAML file."),
    subagent: str = typer.Argument(..., metavar="SUBAGENT", help="Subagent id."),
    tool: str = typer.Argument(..., metavar="TOOL", help="Tool id."),
    args: str = typer.Option("{}", "--args", metavar="JSON", help="Arguments as a JSON object."),
    format: DataFormat = typer.Option(DataFormat.auto, "--format", "-f", metavar="auto|table|jsonl|json", help="auto, table, jsonl or json."),
    timeout: Optional[float] = typer.Option(None, "--timeout", metavar="SECONDS", help="Timeout in seconds if the tool sets none."),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", metavar="DIR", help="Folder of state.db."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read the cache."),
    approve: Approve = typer.Option(Approve.ask, "--approve", metavar="ask|all|none", help="Approval gates: ask (a prompt on a terminal, else the call pauses for 'toolloop approve'), all, or none."),
) -> None:
    """Run one ad-hoc call through every gate and print its receipt."""
    from .._json import JSONDecodeError, loads
    from ..engine.adhoc import adhoc_plan

    started = time.perf_counter()
    require_file(registry, "registry")
    try:
        parsed = loads(args)
    except JSONDecodeError as exc:
        fail(f"--args is not JSON: {exc}", 2, "pass a JSON object, e.g. --args '{\"text\": \"hi\"}'")
    if not isinstance(parsed, dict):
        fail("--args must be a JSON object", 2, "e.g. --args '{\"text\": \"hi\"}'")
    from ..errors import ConfigError

    try:
        admitted = adhoc_plan(registry, subagent, tool, parsed, timeout)
    except ConfigError as exc:
        from .run_checks import write_rejected_summary

        print_findings(exc.problems)
        write_rejected_summary(format, None, started, mode="sequential")
        raise typer.Exit(3)
    from ..engine.session import new_run_id

    run_id = new_run_id()
    # said before the call runs: a call that hangs, pauses or is interrupted is found by this id
    sys.stderr.write(f"toolloop: run {run_id}\n")
    sys.stderr.flush()
    _execute(admitted, format, None, timeout, no_cache, False, state_dir, None, 16 * 1024 * 1024,
             approve=approve.value, run_id=run_id)
