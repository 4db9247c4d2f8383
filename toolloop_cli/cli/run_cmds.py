"""run and call: executing plans and single calls."""

from __future__ import annotations

import sys
import time
from enum import Enum
from pathlib import Path
from typing import IO, Any, List, Optional

import typer

from .common import DataFormat, fail, holding_signals, print_findings, require_file


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
    from ..engine.launch import Launch
    from ..errors import ConfigError
    from .ops_cmds import parse_labels
    from .running import start

    started = time.perf_counter()
    labels = parse_labels(label)
    require_file(plan, "plan")
    _check_numbers(timeout, max_concurrency)
    options = _run_options(halt, timeout, no_cache, refresh_cache, max_output_bytes, approve, order, executor,
                           ray_address, labels)
    _check_stream(lanes, stream, dry_run)
    from .run_checks import lanes_refusal, set_progress, write_rejected_summary

    set_progress(progress)
    if lanes is not None and (refusal := lanes_refusal(plan)):
        fail(refusal, 2, "remove --lanes, or make the plan 'mode: parallel'")
    lanes_stream = _lanes_stream(lanes)
    launch = Launch(state_dir)
    try:
        prepared = launch.admit(plan, options, registry=str(registry) if registry else None,
                                app_root=str(app_root) if app_root else None, max_concurrency=max_concurrency,
                                lanes=lanes_stream, lanes_name=lanes or "-", stream=stream, journal_lanes=not dry_run)
    except KeyboardInterrupt:
        fail("interrupted before the run started; nothing ran", 130)
    except ConfigError as exc:
        print_findings(exc.problems)
        from .._text import counted

        errors = counted(sum(p.level == "error" for p in exc.problems), "error")
        sys.stderr.write(f"toolloop: plan rejected ({errors}); nothing ran\n")
        write_rejected_summary(format, plan, started, executor=executor.value)
        raise typer.Exit(3)
    finally:
        if lanes_stream is not None and lanes_stream is not sys.stdin.buffer and not stream:
            lanes_stream.close()
    _show_warnings(prepared.plan.warnings)
    if dry_run:
        return _dry_run(prepared.plan, format, timeout)
    start(launch, prepared, format, audit)


def _run_options(halt: Optional[str], timeout: Optional[float], no_cache: bool, refresh_cache: bool,
                 max_output_bytes: int, approve: Approve, order: Order, executor: Placement,
                 ray_address: Optional[str], labels: dict) -> Any:
    """``run``'s flags as the run's options (a usage error, exit 2, for a value out of range)."""
    from ..engine.launch import HaltPolicy, RunOptions

    policy = None
    if halt is not None:
        try:
            policy = HaltPolicy.parse(halt)
        except ValueError as exc:
            fail(str(exc), 2)
    return RunOptions(halt=policy, default_timeout_s=timeout, no_cache=no_cache, refresh_cache=refresh_cache,
                      output_cap_bytes=max_output_bytes, approve=approve.value, order=order.value,
                      executor=executor.value, ray_address=ray_address, labels=labels)


def _check_numbers(timeout: Optional[float], max_concurrency: Optional[int]) -> None:
    if timeout is not None and timeout <= 0:
        fail("--timeout must be above 0", 2)
    if max_concurrency is not None and max_concurrency < 1:
        fail(f"-j/--max-concurrency {max_concurrency}: at least one lane must run at a time", 2,
             "use 1 or more (e.g. -j 4), or leave it out to use the plan's max_concurrency")


def _check_stream(lanes: Optional[str], stream: bool, dry_run: bool) -> None:
    if stream and lanes is None:
        fail("--stream needs --lanes FILE or --lanes -", 2)
    if stream and dry_run:
        fail("--stream and --dry-run do not go together: a streamed lane is admitted only when it runs", 2)


def _lanes_stream(lanes: Optional[str]) -> Optional[IO[bytes]]:
    if lanes is None:
        return None
    from ..engine.launch import open_lanes
    from ..errors import UsageError

    try:
        return open_lanes(lanes)
    except UsageError as exc:
        fail(str(exc), 2)


def _show_warnings(warnings: list) -> None:
    """The plan's warnings, but those the project's settings leave out (inline or pyproject.toml
    ignores): ``validate`` said them already."""
    if not warnings:
        return
    from ..lint.suppress import Suppressor, load_settings

    try:
        settings = load_settings()
        shown = Suppressor(settings.ignore).keep(warnings)
    except Exception:  # noqa: BLE001 - a bad pyproject setting is validate's to report
        shown = warnings
    print_findings(shown)


def _dry_run(admitted: Any, format: DataFormat, timeout: Optional[float]) -> None:
    from ..engine.dryrun import dry_run_records
    from .running import Output, quiet_broken_pipe

    out = Output(format)
    try:
        for rec in dry_run_records(admitted, timeout):
            out.write(rec)
        out.close()
    except BrokenPipeError:
        quiet_broken_pipe()


@holding_signals
def call(
    registry: Path = typer.Argument(..., metavar="REGISTRY", help="Registry YAML file."),
    subagent: str = typer.Argument(..., metavar="SUBAGENT", help="Subagent id."),
    tool: str = typer.Argument(..., metavar="TOOL", help="Tool id."),
    args: str = typer.Option("{}", "--args", metavar="JSON", help="Arguments as a JSON object."),
    format: DataFormat = typer.Option(DataFormat.auto, "--format", "-f", metavar="auto|table|jsonl|json", help="auto, table, jsonl or json."),
    timeout: Optional[float] = typer.Option(None, "--timeout", metavar="SECONDS", help="Timeout in seconds if the tool sets none."),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", metavar="DIR", help="Folder of state.db (default .toolloop, or TOOLLOOP_STATE_DIR)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read the cache."),
    approve: Approve = typer.Option(Approve.ask, "--approve", metavar="ask|all|none", help="Approval gates: ask (a prompt on a terminal, else the call pauses for 'toolloop approve'), all, or none."),
) -> None:
    """Run one ad-hoc call through every gate and print its receipt."""
    from .._json import JSONDecodeError, loads
    from ..engine.launch import Launch, RunOptions
    from ..errors import ConfigError
    from .running import start

    started = time.perf_counter()
    require_file(registry, "registry")
    try:
        parsed = loads(args)
    except JSONDecodeError as exc:
        fail(f"--args is not JSON: {exc}", 2, "pass a JSON object, e.g. --args '{\"text\": \"hi\"}'")
    if not isinstance(parsed, dict):
        fail("--args must be a JSON object", 2, "e.g. --args '{\"text\": \"hi\"}'")
    launch = Launch(state_dir)
    options = RunOptions(default_timeout_s=timeout, no_cache=no_cache, approve=approve.value)
    try:
        prepared = launch.call(registry, subagent, tool, parsed, options)
    except ConfigError as exc:
        from .run_checks import write_rejected_summary

        print_findings(exc.problems)
        write_rejected_summary(format, None, started, mode="sequential")
        raise typer.Exit(3)
    # said before the call runs: a call that hangs, pauses or is interrupted is found by this id
    sys.stderr.write(f"toolloop: run {prepared.run_id}\n")
    sys.stderr.flush()
    start(launch, prepared, format)
