"""init: a small working App, its registry and plans to start from."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from .common import fail

REGISTRY = """\
# A toolloop registry: the tools an App exposes, grouped by subagent. Every mapping is closed (an
# unknown key is an error). Check it, and the plans, with: toolloop validate .
version: 1
app_root: .                 # the folder holding the 'app' package, relative to this file
subagents:
  worker:
    runner_defaults:
      tool_timeout_s: 30      # every call has a timeout; a tool may set its own timeout_s
      max_calls: 100          # at most this many calls in one run of this subagent
    tools:
      shout:
        callable: app.tools:shout
        description: Upper-case a text.
        input_schema:
          type: object
          additionalProperties: false
          required: [text]
          properties: {text: {type: string}}
        output_schema:
          type: object
          required: [text]
          properties: {text: {type: string}}
        cacheable: true       # the same arguments later return the stored result
      count_words:
        callable: app.tools:count_words
        description: Count the words of a text.
        input_schema:
          type: object
          additionalProperties: false
          required: [text]
          properties: {text: {type: string}}
        output_schema:
          type: object
          required: [words]
          properties: {words: {type: integer}}
      pause:
        callable: app.tools:pause
        description: Wait a moment, then return the text (an async tool, on trio).
        timeout_s: 5
        retry: {max_attempts: 2, backoff_s: 0.1, on: [timeout]}
        input_schema:
          type: object
          additionalProperties: false
          required: [text]
          properties: {text: {type: string}, seconds: {type: number, minimum: 0, maximum: 2}}
        output_schema: {type: object, required: [text]}
"""

TOOLS = '''\
"""The App's tools: plain functions called with the admitted arguments as keyword arguments.

Each returns JSON (a dict, a list, a string, a number, true/false or None). Anything it raises
becomes an ``error`` receipt; toolloop times it out, retries it and journals it as the registry says.
"""

import trio


def shout(text: str) -> dict:
    return {"text": text.upper()}


def count_words(text: str) -> dict:
    return {"words": len(text.split())}


async def pause(text: str, seconds: float = 0.1) -> dict:
    await trio.sleep(seconds)
    return {"text": text}
'''

SEQUENTIAL = """\
# A sequential plan: calls run in order. Run it with: toolloop run plans/sequential.yml
version: 1
registry: ../registry.yml   # relative to this file
subagent: worker
mode: sequential
calls:
  - {call_key: loud, tool: shout, args: {text: hello}}
  - {call_key: count, tool: count_words, args: {text: one two three}}
  - {call_key: wait, tool: pause, args: {text: done, seconds: 0.05}}
"""

PARALLEL = """\
# A parallel plan: lanes run at once (up to max_concurrency); calls inside a lane run in order.
# Run it with: toolloop run plans/parallel.yml   (more lanes as JSON Lines: --lanes FILE)
version: 1
registry: ../registry.yml
subagent: worker
mode: parallel
max_concurrency: 4
lanes:
  - item_key: doc-1
    calls:
      - {call_key: shout, tool: shout, args: {text: first document}}
      - {call_key: count, tool: count_words, args: {text: first document}}
  - item_key: doc-2
    calls:
      - {call_key: shout, tool: shout, args: {text: second document}}
      - {call_key: count, tool: count_words, args: {text: the second document}}
  - item_key: doc-3
    calls:
      - {call_key: wait, tool: pause, args: {text: third, seconds: 0.1}}
"""

FILES = {
    "registry.yml": REGISTRY,
    "app/__init__.py": '"""An App for toolloop (see registry.yml)."""\n',
    "app/tools.py": TOOLS,
    "plans/sequential.yml": SEQUENTIAL,
    "plans/parallel.yml": PARALLEL,
}


def init(folder: Path = typer.Argument(Path("."), metavar="DIR", help="Where to write the App (created when missing).")) -> None:
    """Write a small working App package, its registry and a sequential and a parallel plan.

    Existing files are never overwritten: if any of them exists, nothing is written."""
    from ..contract.registry import display_path

    if folder.exists() and not folder.is_dir():
        fail(f"{folder} is not a folder", 2)
    targets = {name: folder / name for name in FILES}
    present = [display_path(p) for p in targets.values() if p.exists() or p.is_symlink()]
    if present:
        fail(f"{len(present)} file{'s' if len(present) != 1 else ''} would be overwritten: {', '.join(present)};"
             " nothing was written", 1, "run toolloop init in a new or empty folder")
    try:
        for name, path in targets.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "x", encoding="utf-8") as fh:  # "x": never replace a file made meanwhile
                fh.write(FILES[name])
    except OSError as exc:
        fail(f"cannot write {exc.filename}: {exc.strerror}", 1)
    shown = display_path(folder)
    prefix = "" if shown == "." else f"{shown}/"
    sys.stderr.write(
        f"wrote {', '.join(prefix + name for name in FILES)}\n"
        f"next:\n"
        f"  toolloop validate {shown}\n"
        f"  toolloop run {prefix}plans/sequential.yml\n"
        f"  toolloop run {prefix}plans/parallel.yml --format jsonl\n")
