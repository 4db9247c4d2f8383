"""The toolloop command line. Commands parse, call, render and set the exit code; nothing else.

Heavy imports live inside the commands so that ``--help`` and shell completion stay fast.
"""

from __future__ import annotations

import functools
from importlib import import_module
from typing import Any, Callable, Optional

import typer

from . import _help, _params
from ._lazy_group import LazyCommands

_params.install()  # plain command-line values are converted without pydantic (see _params)
_help.install()  # PATH... for an argument of several values, PLAN not {PLAN} in usage (see _help)


def _version(value: bool) -> None:
    if value:
        from .common import version

        typer.echo(f"toolloop {version()}")
        raise typer.Exit()


def _root(
    version: Optional[bool] = typer.Option(None, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Run registered callables from declarative plans."""


def _typer() -> typer.Typer:
    """The root's Typer with its options and no command registered."""
    root = typer.Typer(
        name="toolloop",
        help="Run registered callables from declarative plans: every call admitted, timed out, retried, "
        "cached, redacted, journaled and returned as a receipt.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    root.callback()(_root)
    return root


def _cmd(module: str, function: str, **how: Any) -> Callable[[typer.Typer], None]:
    def register(root: typer.Typer) -> None:
        root.command(**how)(getattr(import_module(f"{__package__}.{module}"), function))

    return register


def _group(module: str, attribute: str, name: str) -> Callable[[typer.Typer], None]:
    def register(root: typer.Typer) -> None:
        root.add_typer(getattr(import_module(f"{__package__}.{module}"), attribute), name=name)

    return register


@functools.cache
def _runs_app() -> typer.Typer:
    from . import prune_cmd, routed_cmds, runs_cmds

    runs_cmds.runs_app.command("export")(routed_cmds.export)
    runs_cmds.runs_app.command("prune")(prune_cmd.prune)
    runs_cmds.runs_app.command("verify")(runs_cmds.verify)
    return runs_cmds.runs_app


def _runs(root: typer.Typer) -> None:
    root.add_typer(_runs_app(), name="runs")


#: Every command of the root, by name, in the order typer lists them (the commands, then the
#: groups), each as its registration; a command's module is imported when it is registered.
COMMANDS: dict[str, Callable[[typer.Typer], None]] = {
    "init": _cmd("init_cmd", "init"),
    "validate": _cmd("lint_cmds", "validate"),
    "tools": _cmd("lint_cmds", "tools"),
    "schema": _cmd("lint_cmds", "schema"),
    "lock": _cmd("lint_cmds", "lock"),
    "run": _cmd("run_cmds", "run"),
    "call": _cmd("run_cmds", "call"),
    "resume": _cmd("runs_cmds", "resume"),
    "approve": _cmd("approvals_cmds", "approve"),
    "replay": _cmd("routed_cmds", "replay"),
    "steer": _cmd("routed_cmds", "steer"),
    "abort": _cmd("routed_cmds", "abort"),
    "serve": _cmd("serve_cmd", "serve"),
    "test": _cmd("test_cmd", "test"),
    "__complete-run-ids": _cmd("complete_cmd", "complete_run_ids", name="__complete-run-ids", hidden=True),
    "approvals": _group("approvals_cmds", "approvals_app", "approvals"),
    "runs": _runs,
    "mcp": _group("mcp_cmd", "mcp_app", "mcp"),
}


@functools.cache
def whole_app() -> typer.Typer:
    """The Typer app with every command registered (what typer's test runner, the generated
    artifacts and the tests that walk the command tree read)."""
    root = _typer()
    for register in COMMANDS.values():
        register(root)
    return root


def __getattr__(name: str) -> Any:
    if name == "app":
        return whole_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def command_line() -> Any:
    """The root command as the program runs it: typer's own group and options, each command
    built (and its module imported) only when it is looked up (see ``_lazy_group``)."""
    root_typer = _typer()
    root = typer.main.get_command(root_typer)

    def build(name: str) -> Any:
        scratch = typer.Typer()
        COMMANDS[name](scratch)
        if scratch.registered_commands:
            return typer.main.get_command_from_info(
                scratch.registered_commands[0], pretty_exceptions_short=root_typer.pretty_exceptions_short,
                rich_markup_mode=root_typer.rich_markup_mode)
        return typer.main.get_group_from_info(
            scratch.registered_groups[0], pretty_exceptions_short=root_typer.pretty_exceptions_short,
            rich_markup_mode=root_typer.rich_markup_mode, suggest_commands=root_typer.suggest_commands)

    root.commands = LazyCommands({name: functools.partial(build, name) for name in COMMANDS})
    return root


#: the collector's youngest generation is examined every this many new containers (Python's own
#: default is 700): see ``collect_less_often``
GC_YOUNG_THRESHOLD = 10_000


def collect_less_often() -> None:
    """Run the cycle collector less often in this process. A batch allocates and frees many small
    containers a call (records, receipts, coroutines) and keeps few of them: examined every 700
    allocations, the survivors of the moment were examined over and over, about 7 % of a batch's
    instructions; every 10,000 they are examined a fourteenth as often. Cycles are still
    collected, a little later. Set for the command line's own process only (a library caller
    keeps its own settings)."""
    import gc

    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def main() -> None:
    """Console-script entry point: user mistakes end with a message and an exit code, never a
    traceback; anything else is a bug in toolloop, named on one line (exit 70)."""
    import sys

    from .._paths import forget_start_folder
    from ..errors import ConfigError, InternalError, RunError, StateError, UsageError
    from .common import guard_standard_streams

    forget_start_folder()
    guard_standard_streams()
    collect_less_often()
    try:
        if _wants_sarif(sys.argv[1:]):
            _validate_with_sarif_errors()
        else:
            command_line()()
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
        code = command_line()(standalone_mode=False)
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
