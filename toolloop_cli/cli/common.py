"""What every command shares: consoles, output format choice, reporting findings and errors."""

from __future__ import annotations

import functools
import os
import sys
from enum import Enum
from typing import IO, Any, Callable, NoReturn

import typer


class DataFormat(str, Enum):
    auto = "auto"
    table = "table"
    jsonl = "jsonl"
    json = "json"


class LintFormat(str, Enum):
    text = "text"
    json = "json"
    github = "github"
    sarif = "sarif"


def err_console() -> Any:
    from rich.console import Console

    return Console(stderr=True, no_color="NO_COLOR" in os.environ or None, highlight=False)


def out_console(file: IO[str] | None = None) -> Any:
    from rich.console import Console

    return Console(file=file, no_color="NO_COLOR" in os.environ or None, highlight=False)


#: standard output was closed when toolloop started (``>&-``)
STDOUT_CLOSED = False


def guard_standard_streams() -> None:
    """A closed standard stream is opened on /dev/null before anything else is, so no file toolloop
    opens (the state database) can take its number and receive what is written to it."""
    global STDOUT_CLOSED
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            if fd == 1:
                STDOUT_CLOSED = True
            os.open(os.devnull, os.O_RDWR)  # takes the lowest free number: this one
    for name, fd, mode in (("stdin", 0, "r"), ("stdout", 1, "w"), ("stderr", 2, "w")):
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, mode, closefd=False))


def notice(text: str) -> None:
    """One line for a person on standard error; safe in a signal handler (one unbuffered write,
    no locks)."""
    os.write(2, f"toolloop: {text}\n".encode())


def holding_signals(command: Callable[..., Any]) -> Callable[..., Any]:
    """A command that runs a plan (run, call, resume, replay) takes SIGINT and SIGTERM from its
    first line to its last (``engine.session.held_signals``): Ctrl-C at any moment ends it with
    what was committed and the summary, never a traceback or an output cut off half-way."""

    @functools.wraps(command)
    def holding(*args: Any, **kwargs: Any) -> Any:
        from ..engine.session import held_signals

        with held_signals(notice):
            return command(*args, **kwargs)

    return holding


def fail(message: str, code: int = 2, hint: str | None = None) -> NoReturn:
    """Print ``toolloop: error: message`` (and a hint) on stderr and exit with ``code``; control
    characters in either are shown escaped."""
    from .._text import escape

    sys.stderr.write(f"toolloop: error: {escape(message)}\n")
    if hint:
        sys.stderr.write(f"  hint: {escape(hint)}\n")
    raise typer.Exit(code)


def print_findings(problems: list, stream: IO[str] | None = None) -> None:
    """Findings, one a line; warnings the project silenced (``# toolloop: ignore[...]`` on their
    line, ``ignore`` in pyproject.toml) are left out, as ``validate`` leaves them out, so a refused
    registry does not bring back what a person already accepted. Errors are always shown."""
    from ..render.lint import format_text

    if any(getattr(p, "level", "error") != "error" for p in problems):
        from ..lint.suppress import Suppressor, load_settings

        try:
            quiet = Suppressor(load_settings().ignore)
            problems = [p for p in problems if p.level == "error" or quiet.keep([p])]
        except Exception:  # noqa: BLE001 - a bad pyproject setting is validate's to report
            pass
    (stream or sys.stderr).write(format_text(problems))


def resolve_format(fmt: DataFormat, stream: IO[Any]) -> str:
    if fmt is DataFormat.auto:
        try:
            return "table" if stream.isatty() else "jsonl"
        except (AttributeError, ValueError):
            return "jsonl"
    return fmt.value


def record_writer(fmt: str, out: IO[bytes]) -> Any:
    from ..render.records import JsonArrayWriter, JsonlWriter, TableWriter

    if fmt == "jsonl":
        return JsonlWriter(out)
    if fmt == "json":
        return JsonArrayWriter(out)
    import io

    return TableWriter(out_console(io.TextIOWrapper(out, encoding="utf-8", write_through=True)))


#: the name toolloop is installed under (``pip install toolloop-cli``); the command is ``toolloop``
DISTRIBUTION = "toolloop-cli"


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as _v

    try:
        return _v(DISTRIBUTION)
    except PackageNotFoundError:
        return "0+unknown"


def require_file(path: Any, what: str) -> None:
    """Exit 2 with a clear message unless ``path`` is a file (a path no file system takes, too)."""
    from .._paths import look_at
    from .._text import excerpt

    looked = look_at(path)
    shown = excerpt(str(path))
    if looked.kind == "folder":
        fail(f"{what} is a folder, not a file: {shown}", 2)
    if looked.kind == "missing":
        fail(f"{what} not found: {shown}", 2)
    if looked.kind == "other":
        fail(f"{what} is not a regular file: {shown}", 2)
    if looked.kind == "bad":
        fail(f"{what} {shown}: {looked.why}", 2)
