"""Findings: errors are data with a place. Rendering lives in ``toolloop_cli.render.lint``."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Iterable

from .._text import excerpt
from .source import Path, SourceMap

# Stable finding codes. The table in docs/findings.md is generated from this mapping and a
# test keeps the two in step. Codes are never reused for another meaning.
CODES: dict[str, str] = {
    # loading (file level)
    "TL101": "file cannot be read",
    "TL102": "YAML syntax error",
    "TL103": "duplicate key",
    "TL104": "document too large after alias expansion (alias bomb)",
    "TL105": "tag or value not allowed in safe YAML",
    "TL106": "document is empty, not a mapping, or the other kind of file (a plan given as a registry, or the reverse)",
    # structure
    "TL201": "unknown key",
    "TL202": "required key missing",
    "TL203": "value has the wrong type or is out of range",
    "TL204": "unsupported version",
    "TL205": "key not used in this plan mode",
    # registry rules
    "TL301": "duplicate tool id",
    "TL302": "allowed_tools names an unknown tool",
    "TL303": "dispatch names an unknown tool",
    "TL304": "callable is not 'module:attribute'",
    "TL305": "callable path has a private segment",
    "TL306": "callable module cannot be imported",
    "TL307": "callable attribute not found",
    "TL308": "callable target is not callable",
    "TL309": "a tool needs exactly one of callable or mcp",
    "TL310": "no timeout for a tool",
    "TL311": "isolation: process on an async callable",
    "TL312": "app_root folder does not exist",
    "TL313": "MCP server cannot be started, or does not offer an allowed tool",
    "TL320": "schema is not a valid JSON Schema",
    "TL321": "$ref points outside the document",
    "TL322": "$ref does not resolve inside the document",
    "TL330": "control envelope does not compile",
    "TL340": "redact entry is not a JSON Pointer",
    "TL341": "redact pointer can never match the schema",
    "TL342": "secret-looking property is not redacted",
    "TL350": "approval expression does not compile",
    "TL351": "retry or concurrency policy is inconsistent",
    "TL352": "a write that is not idempotent is set to be retried after a timeout",
    "TL360": "evidence hook does not resolve",
    "TL370": "registry differs from toolloop.lock",
    "TL371": "toolloop.lock missing or unreadable",
    # plan admission
    "TL401": "unknown subagent",
    "TL402": "unknown tool",
    "TL403": "tool not in the allowlist",
    "TL404": "arguments fail the tool's input schema",
    "TL405": "duplicate item_key",
    "TL406": "duplicate call_key",
    "TL407": "plan exceeds the subagent's max_calls",
    "TL408": "plan exceeds a tool's max_calls",
    "TL409": "max_concurrency missing or below 1",
    "TL410": "routed plan: profile, provider or budget problem",
    "TL411": "routed plan: allowed_tools outside the subagent's allowlist",
    "TL412": "plan's registry cannot be found",
    "TL413": "lane payload cannot feed this call",
    "TL414": "lanes input line is not a lane",
    "TL415": "prompt file missing or empty",
    "TL416": "a file the plan names (instructions, judge prompt, replay fixture) is missing or empty",
    "TL417": "routed plan: context fails the plan's inputs schema",
    "TL418": "routed plan: outcome name reused or final_schema cannot hold 'outcome'",
    "TL419": "routed plan: route key is neither a declared nor an engine outcome",
    "TL420": "routed plan: supervisor rule or on_violation problem",
    "TL421": "replay fixture line is not a model answer",
}


@dataclass(frozen=True, slots=True)
class Problem:
    """One finding: where it is, what it is, how to fix it."""

    code: str
    message: str
    file: str
    line: int = 1
    col: int = 1
    path: str = ""
    hint: str = ""
    level: str = "error"  # error | warning

    @property
    def sort_key(self) -> tuple:
        return (self.file, self.line, self.col, self.code, self.message)

    def as_dict(self) -> dict:
        return {
            "code": self.code,
            "level": self.level,
            "file": self.file,
            "line": self.line,
            "col": self.col,
            "path": self.path,
            "message": self.message,
            "hint": self.hint,
        }


def json_path(path: Path) -> str:
    """Render a data path as ``subagents.worker-a.tools[0].callable`` (keys dotted, indexes
    bracketed); each key is shown as an excerpt, control characters escaped."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + excerpt(str(part))
    return out


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return found[0] if found else None


@dataclass
class Collector:
    """Gathers problems for one document, placing each through the document's source map."""

    smap: SourceMap
    problems: list[Problem] = field(default_factory=list)

    def add(
        self,
        code: str,
        message: str,
        path: Path = (),
        hint: str = "",
        level: str = "error",
        at_key: bool = False,
    ) -> None:
        line, col = self.smap.position(path, at_key=at_key)
        self.problems.append(
            Problem(code, message, self.smap.file, line, col, json_path(path), hint, level)
        )

    @property
    def has_errors(self) -> bool:
        return any(p.level == "error" for p in self.problems)
