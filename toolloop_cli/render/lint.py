"""Lint formats for findings: text, json, github, sarif. Pure functions: data in, text out."""

from __future__ import annotations

import json
from typing import Iterable

from .._text import escape
from ..contract.problems import CODES, Problem


def format_text(problems: Iterable[Problem]) -> str:
    """One finding per line: ``FILE:LINE:COL: LEVEL CODE message``, control characters escaped
    (a key, a path or a message never moves the cursor or starts a line of its own)."""
    lines = []
    for p in problems:
        where = f"{p.path}: " if p.path else ""
        hint = f" ({p.hint})" if p.hint else ""
        lines.append(escape(f"{p.file}:{p.line}:{p.col}: {p.level} {p.code} {where}{p.message}{hint}"))
    return "\n".join(lines) + ("\n" if lines else "")


def format_json(problems: Iterable[Problem]) -> str:
    return json.dumps([p.as_dict() for p in problems], indent=2) + "\n"


def _gh_escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_escape_prop(s: str) -> str:
    return _gh_escape_data(s).replace(":", "%3A").replace(",", "%2C")


def format_github(problems: Iterable[Problem]) -> str:
    """GitHub Actions workflow commands, one annotation per finding."""
    lines = []
    for p in problems:
        kind = "error" if p.level == "error" else "warning"
        props = f"file={_gh_escape_prop(escape(p.file))},line={p.line},col={p.col},title={_gh_escape_prop(p.code)}"
        text = f"{p.path}: {p.message}" if p.path else p.message
        if p.hint:
            text += f" ({p.hint})"
        lines.append(f"::{kind} {props}::{_gh_escape_data(escape(text))}")
    return "\n".join(lines) + ("\n" if lines else "")


def artifact_uri(file: str) -> str:
    """A SARIF artifact URI: relative paths stay relative (resolved against the checkout by
    code-scanning tools), absolute ones become file: URIs; both percent-encoded."""
    from pathlib import PurePosixPath, PureWindowsPath
    from urllib.parse import quote

    if PureWindowsPath(file).is_absolute() and not file.startswith("/"):
        return PureWindowsPath(file).as_uri()
    posix = file.replace("\\", "/")
    if PurePosixPath(posix).is_absolute():
        return PurePosixPath(posix).as_uri()
    return quote(posix)


#: what each family of codes is about, for the full description of a SARIF rule
_FAMILIES = {
    "TL1": "Found while reading the file, before its structure is checked; nothing else in the file is"
           " checked until it loads.",
    "TL2": "A structure problem: registries and plans are closed mappings with required keys and typed"
           " values.",
    "TL3": "A registry rule: the registry is refused by validate, run and call until it is fixed"
           " (warnings excepted).",
    "TL4": "A plan admission problem: run refuses the whole plan (exit 3) and nothing runs.",
}


def sarif_rule(code: str) -> dict:
    """A SARIF reporting descriptor: short and full description, and help on how to fix."""
    from ..contract.problems import FIXES

    short = CODES.get(code, code)
    fix = FIXES.get(code, "")
    return {
        "id": code,
        "name": "".join(w.capitalize() for w in short.replace("$", "").split()[:6]),
        "shortDescription": {"text": short},
        "fullDescription": {"text": f"{short[:1].upper()}{short[1:]}. {_FAMILIES.get(code[:3], '')}".strip()},
        "help": {"text": fix.replace("`", ""), "markdown": fix},
    }


def sarif_document(problems: list[Problem], version: str, error: str | None = None,
                   notes: Iterable[str] = ()) -> dict:
    """A SARIF 2.1.0 log with one run; rules are the finding codes that occur. ``error`` (a usage
    error: nothing was checked) is carried as a failed invocation; ``notes`` (what could not be
    checked, and why) as the invocation's warnings."""
    used = sorted({p.code for p in problems})
    rules = [sarif_rule(code) for code in used]
    index = {code: i for i, code in enumerate(used)}
    results = []
    for p in problems:
        text = f"{p.path}: {p.message}" if p.path else p.message
        if p.hint:
            text += f" ({p.hint})"
        results.append(
            {
                "ruleId": p.code,
                "ruleIndex": index[p.code],
                "level": "error" if p.level == "error" else "warning",
                "message": {"text": text},
                "locations": [
                    {
                        "physicalLocation": {
                            "artifactLocation": {"uri": artifact_uri(p.file)},
                            "region": {"startLine": p.line, "startColumn": p.col},
                        }
                    }
                ],
            }
        )
    invocation: dict = {"executionSuccessful": error is None}
    notifications = [{"level": "warning", "message": {"text": note}} for note in notes]
    if error is not None:
        invocation["exitCode"] = 2
        notifications.insert(0, {"level": "error", "message": {"text": error}})
    if notifications:
        invocation["toolExecutionNotifications"] = notifications
    return {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": "toolloop", "version": version, "rules": rules}},
                "invocations": [invocation],
                "results": results,
            }
        ],
    }


def format_sarif(problems: list[Problem], version: str, error: str | None = None, notes: Iterable[str] = ()) -> str:
    return json.dumps(sarif_document(problems, version, error, notes), indent=2) + "\n"


FORMATS = ("text", "json", "github", "sarif")


def render(problems: list[Problem], fmt: str, version: str, notes: Iterable[str] = ()) -> str:
    """Findings in ``fmt``; ``notes`` (what was not checked, and why) are carried where the
    format has a place for them: GitHub notices, SARIF notifications (text and JSON leave them to
    standard error)."""
    if fmt == "text":
        return format_text(problems)
    if fmt == "json":
        return format_json(problems)
    if fmt == "github":
        return format_github(problems) + "".join(f"::notice::{_gh_escape_data(note)}\n" for note in notes)
    return format_sarif(problems, version, notes=notes)
