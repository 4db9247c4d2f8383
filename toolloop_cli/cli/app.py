"""The toolloop command line. Commands parse, call, render and set the exit code; nothing else.

Heavy imports live inside the commands so that ``--help`` and shell completion stay fast.
"""

from __future__ import annotations

from typing import Optional

import typer

from . import approvals_cmds, complete_cmd, init_cmd, lint_cmds, mcp_cmd, prune_cmd, routed_cmds, run_cmds, runs_cmds, serve_cmd
from . import _params, test_cmd

_params.install()  # plain command-line values are converted without pydantic (see _params)

app = typer.Typer(
    name="toolloop",
    help="Run registered callables from declarative plans: every call admitted, timed out, retried, "
    "cached, redacted, journaled and returned as a receipt.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from .common import version

        typer.echo(f"toolloop {version()}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Optional[bool] = typer.Option(None, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Run registered callables from declarative plans."""


app.command()(init_cmd.init)
app.command()(lint_cmds.validate)
app.command()(lint_cmds.tools)
app.command()(lint_cmds.schema)
app.command()(lint_cmds.lock)
app.command()(run_cmds.run)
app.command()(run_cmds.call)
app.command()(runs_cmds.resume)
app.command()(approvals_cmds.approve)
app.add_typer(approvals_cmds.approvals_app, name="approvals")
app.command()(routed_cmds.replay)
app.command()(routed_cmds.steer)
app.command()(routed_cmds.abort)
runs_cmds.runs_app.command("export")(routed_cmds.export)
runs_cmds.runs_app.command("prune")(prune_cmd.prune)
runs_cmds.runs_app.command("verify")(runs_cmds.verify)
app.add_typer(runs_cmds.runs_app, name="runs")
app.command()(serve_cmd.serve)
app.command()(test_cmd.test)
app.add_typer(mcp_cmd.mcp_app, name="mcp")
app.command("__complete-run-ids", hidden=True)(complete_cmd.complete_run_ids)


def main() -> None:
    """Console-script entry point: user mistakes end with a message and an exit code, never a
    traceback; anything else is a bug in toolloop, named on one line (exit 70)."""
    import sys

    from .._paths import forget_start_folder
    from ..errors import ConfigError, InternalError, RunError, StateError, UsageError
    from .common import guard_standard_streams

    forget_start_folder()
    guard_standard_streams()
    try:
        if _wants_sarif(sys.argv[1:]):
            _validate_with_sarif_errors()
        else:
            app()
    except (UsageError, RunError, StateError) as exc:
        from .._text import clip

        # a damaged state database (StateError) is exit 2 whichever command read it
        sys.stderr.write(f"toolloop: error: {clip(str(exc), 500)}\n")
        sys.exit(1 if isinstance(exc, RunError) else 2)
    except ConfigError as exc:
        from .common import print_findings

        print_findings(exc.problems)
        sys.exit(3)
    except InternalError as exc:
        internal_error(exc, str(exc))
    except Exception as exc:  # noqa: BLE001 - the one place a bug in toolloop is caught
        internal_error(exc)


def internal_error(exc: BaseException, message: str = "") -> None:
    """Name a bug in toolloop on one line and exit 70. The exception's own text is left out (it
    may hold a value that is redacted everywhere else); ``TOOLLOOP_DEBUG=1`` prints the traceback."""
    import os
    import sys
    import traceback

    from .._text import clip

    if os.environ.get("TOOLLOOP_DEBUG", "") not in ("", "0"):
        traceback.print_exception(exc)
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]  # name the first failure itself, not the task group around it
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    where = ""
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if os.path.abspath(filename).startswith(package + os.sep):
            where = f" at {os.path.relpath(filename, os.path.dirname(package))}:{tb.tb_lineno}"
        tb = tb.tb_next
    detail = f": {clip(message)}" if message else ""
    try:
        sys.stderr.write(f"toolloop: internal error: {type(exc).__name__}{where}{detail} (a bug in toolloop; "
                         "run again with TOOLLOOP_DEBUG=1 for the traceback, and please report it)\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # standard error itself is gone: the exit code still says it
    sys.exit(70)


def _wants_sarif(argv: list[str]) -> bool:
    """``validate ... --format sarif``: a usage error must still leave a SARIF log on stdout."""
    if not argv or argv[0] != "validate":
        return False
    for i, arg in enumerate(argv):
        if arg in ("--format", "-f") and argv[i + 1:i + 2] == ["sarif"]:
            return True
        if arg in ("--format=sarif", "-fsarif"):
            return True
    return False


def _validate_with_sarif_errors() -> None:
    import sys

    try:
        code = app(standalone_mode=False)
    except typer.TyperException as exc:  # a bad flag or a missing argument, found by the parser
        from ..render.lint import format_sarif
        from .common import version

        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        sys.stdout.write(format_sarif([], version(), error=message))
        if hasattr(exc, "show"):
            exc.show()
        else:
            sys.stderr.write(f"toolloop: error: {message}\n")
        sys.exit(getattr(exc, "exit_code", 2))
    except typer.Abort:
        sys.exit(130)
    sys.exit(code or 0)
