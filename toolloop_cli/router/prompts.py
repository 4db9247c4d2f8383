"""The packaged prompt files and the App's own prompt files, read and checked.

A prompt file is Markdown split into sections by lines of the form ``<!-- name -->``; text
before the first section is a note for editors and is never sent. A section may use the
placeholders listed for it in ``SECTIONS`` (``{goal}``, ``{summary}``, ...); anything else in
braces is left alone, so JSON examples need no escaping. A missing or empty file, a missing
section or an unknown placeholder raises ``PromptError``: prompts fail closed.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from typing import Mapping

from ..errors import ToolloopError

_SECTION = re.compile(r"^<!--\s*([a-z_]+)\s*-->[ \t]*$", re.MULTILINE)
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")

#: each packaged prompt file: its sections and the placeholders each section may use
SECTIONS: dict[str, dict[str, tuple[str, ...]]] = {
    "router.md": {
        "system": (),
        "guidance": ("instructions",),
        "turn": ("goal", "context", "tools", "observations", "budgets", "steer"),
        "tool": ("id", "effect", "description", "input_schema"),
        "observation": ("iteration", "tool", "status", "args", "summary"),
        "rejection": ("iteration", "tool", "kind", "args", "summary"),
        "none_yet": (),
        "budgets": ("iterations_left", "tokens_left", "tool_calls_left", "seconds_left", "cost_left"),
        "cost_left": ("cost_left_usd",),
        "steer": ("message",),
    },
    "final.md": {
        "system": (),
        "outcomes": ("outcomes",),
        "turn": ("goal", "context", "observations", "schema", "outcomes"),
        "observation": ("iteration", "tool", "status", "args", "summary"),
        "none_yet": (),
    },
    "repair.md": {
        "turn": ("errors",),
        "error": ("message",),
    },
    "judge.md": {
        "system": (),
        "turn": ("goal", "steps", "used", "left"),
        "step": ("iteration", "action", "tool", "args", "reason", "status", "summary"),
        "omitted": ("count",),
        "none_yet": (),
        "used": ("iterations", "tokens", "tool_calls", "seconds", "cost"),
        "left": ("iterations_left", "tokens_left", "tool_calls_left", "seconds_left", "cost_left"),
        "cost": ("cost_usd",),
        "cost_left": ("cost_left_usd",),
    },
}


class PromptError(ToolloopError):
    """A prompt file is missing, empty or malformed. ``name`` is the file, ``why`` the cause."""

    def __init__(self, name: str, why: str):
        self.name = name
        self.why = why
        super().__init__(f"prompt file '{name}': {why}")


@dataclass(frozen=True, slots=True)
class PromptFile:
    """One packaged prompt file, split into sections."""

    name: str
    sections: Mapping[str, str]

    def fill(self, section: str, **values: object) -> str:
        """The section's text with its placeholders replaced (in one pass: a value that itself
        holds ``{name}`` is never filled again)."""
        text = self.sections[section]
        return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(), text)


@dataclass(frozen=True, slots=True)
class Prompts:
    """The packaged prompts a routed run uses; ``judge`` only when the plan has a judge."""

    router: PromptFile
    final: PromptFile
    repair: PromptFile
    judge: PromptFile | None = None


def parse_prompt(name: str, text: str) -> PromptFile:
    """Split a prompt file's text into its sections and check them against ``SECTIONS``."""
    if not text.strip():
        raise PromptError(name, "the file is empty")
    wanted = SECTIONS[name]
    marks = list(_SECTION.finditer(text))
    sections: dict[str, str] = {}
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        key = mark.group(1)
        if key in sections:
            raise PromptError(name, f"section '{key}' appears twice")
        if key not in wanted:
            raise PromptError(name, f"unknown section '{key}' (expected: {', '.join(wanted)})")
        sections[key] = text[mark.end():end].strip("\n")
    missing = [key for key in wanted if key not in sections]
    if missing:
        raise PromptError(name, f"missing section(s): {', '.join(missing)}")
    for key, body in sections.items():
        for m in _PLACEHOLDER.finditer(body):
            if m.group(1) not in wanted[key]:
                raise PromptError(name, f"section '{key}' uses an unknown placeholder '{{{m.group(1)}}}'"
                                        f" (it may use: {', '.join(wanted[key]) or 'none'})")
    if not sections.get("system", "x").strip() or not sections.get("turn", "x").strip():
        raise PromptError(name, "the system or turn section is empty")
    return PromptFile(name, sections)


def read_packaged(name: str) -> PromptFile:
    """Read one packaged prompt file (``toolloop_cli/prompts/NAME``)."""
    from importlib import resources

    try:
        text = resources.files("toolloop_cli.prompts").joinpath(name).read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError):
        raise PromptError(name, "missing from the installed package") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptError(name, f"cannot be read ({type(exc).__name__})") from None
    return parse_prompt(name, text)


def read_prompts(*, judge: bool = False) -> Prompts:
    """Read every packaged prompt a routed run needs, now (admission reads them once and keeps
    them; a missing or broken one raises ``PromptError``)."""
    return Prompts(read_packaged("router.md"), read_packaged("final.md"), read_packaged("repair.md"),
                   read_packaged("judge.md") if judge else None)


@functools.lru_cache(maxsize=1)
def packaged_prompts() -> Prompts:
    """The packaged prompts, read once per process (for callers that did not keep them)."""
    return read_prompts(judge=True)


def read_app_file(path: str | os.PathLike[str], what: str) -> str:
    """The text of a file the plan names (``what``: "instructions", "judge prompt"); missing,
    unreadable or empty raises ``PromptError`` naming the file."""
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise PromptError(name, f"{what} file not found") from None
    except IsADirectoryError:
        raise PromptError(name, f"{what} path is a folder, not a file") from None
    except UnicodeDecodeError:
        raise PromptError(name, f"{what} file is not UTF-8 text") from None
    except OSError as exc:
        raise PromptError(name, f"{what} file cannot be read ({exc.strerror or type(exc).__name__})") from None
    if not text.strip():
        raise PromptError(name, f"{what} file is empty")
    return text
