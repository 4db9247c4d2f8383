"""toolloop test: regression suites. Parses flags, runs the suites (``toolloop_cli.suite``),
prints ``test`` records (or a table on a terminal) and sets the exit code: 0 every case passed,
1 a case failed or errored, 3 a suite rejected, 2 usage."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from .common import DataFormat, fail, holding_signals, notice, record_writer, require_file, resolve_format
from .run_cmds import Approve

STATE_DIR_HELP = "Folder of state.db (default .toolloop, or TOOLLOOP_STATE_DIR)."


@holding_signals
def test(
    suites: List[Path] = typer.Argument(..., metavar="SUITE", help="Suite files (kind: suite)."),
    format: DataFormat = typer.Option(DataFormat.auto, "--format", "-f", metavar="auto|table|jsonl|json", help="auto, table, jsonl or json."),
    junit: Optional[Path] = typer.Option(None, "--junit", metavar="FILE", help="Also write JUnit XML to FILE."),
    repeat: int = typer.Option(1, "--repeat", metavar="N", min=1, help="Run each case N times; it passes only when all did."),
    record: bool = typer.Option(False, "--record", help="Run each case live and (re)write its fixture from that run, then check it."),
    pattern: Optional[str] = typer.Option(None, "-k", metavar="PATTERN", help="Keep the cases whose name contains PATTERN."),
    approve: Approve = typer.Option(Approve.none, "--approve", metavar="ask|all|none", help="Approval gates of a case that runs live (default none)."),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", metavar="DIR", help=STATE_DIR_HELP),
) -> None:
    """Run regression suites: each case a journaled run checked against what it expects."""
    from ..suite.case import CaseSettings
    from ..suite.runner import load_suites, run_suites

    for path in suites:
        require_file(path, "suite file")
    loaded = load_suites(list(suites), recording=record)  # a ConfigError is exit 3 with its findings (cli.app)
    fmt = resolve_format(format, sys.stdout)
    hooks = {"on_signal": notice, "on_warning": lambda text: notice(f"warning: {text}")}
    if approve is Approve.ask and sys.stdin.isatty() and sys.stderr.isatty():  # a live case's gates, asked here
        from .prompt import TerminalApprover

        hooks["ask"] = TerminalApprover()
    settings = CaseSettings(state_dir=str(state_dir) if state_dir else None, approve=approve.value, hooks=hooks)
    records: list[dict] = []
    writer = record_writer(fmt, sys.stdout.buffer) if fmt != "table" else None

    def emit(rec: dict) -> None:
        records.append(rec)
        if writer is not None:
            writer.write(rec)

    def on_case(rec: dict) -> None:
        if rec.get("diff"):  # a request that differs from the recording: the diff on standard error
            sys.stderr.write(f"toolloop: {rec['name']}: the request differs from the recording:\n{rec['diff']}")
            if not rec["diff"].endswith("\n"):
                sys.stderr.write("\n")

    try:
        summary, interrupted = run_suites(loaded, settings, emit, repeat=repeat, pattern=pattern, record=record, on_case=on_case)
        if writer is not None:
            writer.close()
    except BrokenPipeError:
        from .running import quiet_broken_pipe

        quiet_broken_pipe()
        raise typer.Exit(141)
    if fmt == "table":
        from ..render.suite import suite_table
        from .common import out_console

        suite_table(out_console(), records)
    if junit is not None:
        _write_junit(junit, records)
    if interrupted:
        raise typer.Exit(130)
    raise typer.Exit(0 if summary["failed"] == 0 and summary["errors"] == 0 else 1)


def _write_junit(path: Path, records: list[dict]) -> None:
    from ..suite.junit import junit_xml

    try:
        path.write_bytes(junit_xml(records))
    except OSError as exc:
        fail(f"cannot write --junit {path}: {exc.strerror or exc}", 1)
