"""validate, tools, schema, lock: commands about the contract itself."""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer

from .common import DataFormat, LintFormat, fail, require_file, resolve_format, version

LOCK_NAME = "toolloop.lock"


def _require_file(path: Path, what: str) -> None:
    require_file(path, what)


def validate(
    registry: Path = typer.Argument(..., help="Registry YAML file."),
    plans: Optional[List[Path]] = typer.Argument(None, help="Plan files to admit against the registry."),
    format: LintFormat = typer.Option(LintFormat.text, "--format", "-f", help="Output format for findings."),
    locked: bool = typer.Option(False, "--locked", help=f"Fail when the registry differs from {LOCK_NAME}."),
    strict: bool = typer.Option(False, "--strict", help="Treat warnings as errors."),
) -> None:
    """Lint a registry (and plans against it); exit 1 on any error."""
    from ..contract.registry import display_path, load_registry
    from ..errors import ConfigError
    from ..plan.admit import admit_plan, load_plan
    from ..render.lint import render

    _require_file(registry, "registry")
    for plan in plans or []:
        _require_file(plan, "plan")
    contract, problems = load_registry(registry)
    reg_shown = display_path(registry)
    for plan in plans or []:
        if contract is None:
            _decl, col = load_plan(plan)
            problems += col.problems
            continue
        try:
            admitted = admit_plan(plan, registry=str(registry))
            problems += [p for p in admitted.warnings if p.file != reg_shown]
        except ConfigError as exc:
            problems += [p for p in exc.problems if p.file != reg_shown]
    if locked and contract is not None:
        problems += _lock_drift(registry, contract)
    problems.sort(key=lambda p: p.sort_key)
    if strict:
        from dataclasses import replace

        problems = [replace(p, level="error") for p in problems]
    sys.stdout.write(render(problems, format.value, version()))
    if format is LintFormat.text and not problems:
        sys.stderr.write(f"{reg_shown}: ok\n")
    if any(p.level == "error" for p in problems):
        raise typer.Exit(1)


def _lock_drift(registry: Path, contract: object) -> list:
    """TL370 for every tool added, removed or changed since the lock was written, at the tool's
    place in the registry; TL371 when there is no readable lock."""
    from .._text import clip, quoted
    from ..contract.problems import Problem, json_path
    from ..contract.registry import display_path, load_document

    lock_path = registry.parent / LOCK_NAME
    shown = display_path(lock_path)
    try:
        lock = json.loads(lock_path.read_text(encoding="utf-8"))
        locked_tools = lock["tools"]
        if not isinstance(locked_tools, dict):
            raise TypeError("'tools' is not a mapping")
    except FileNotFoundError:
        return [Problem("TL371", f"{shown} does not exist", display_path(registry),
                        hint=f"run 'toolloop lock {registry}' and commit {LOCK_NAME}")]
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        return [Problem("TL371", f"{shown} is unreadable: {clip(str(exc))}", shown, hint=f"run 'toolloop lock {registry}' again")]
    current = contract.tool_hashes()  # type: ignore[attr-defined]
    smap = load_document(registry).smap
    out = []
    for name in sorted(set(current) | set(locked_tools)):
        sid, _, tid = name.partition("/")
        if name not in locked_tools:
            msg = f"tool {quoted(name)} is not in {shown} (added since the lock was written)"
        elif name not in current:
            msg = f"tool {quoted(name)} is in {shown} but no longer in the registry"
        elif locked_tools[name] != current[name]:
            msg = f"tool {quoted(name)} changed since {shown} was written"
        else:
            continue
        line, col = smap.position(("subagents", sid, "tools", tid), at_key=True)
        out.append(Problem("TL370", msg, smap.file, line, col, json_path(("subagents", sid, "tools", tid)),
                           hint=f"review the change, then run 'toolloop lock {registry}'"))
    return out


def lock(registry: Path = typer.Argument(..., help="Registry YAML file.")) -> None:
    """Write toolloop.lock beside the registry: every tool's contract hash."""
    from ..contract.registry import display_path, load_registry
    from .common import print_findings

    _require_file(registry, "registry")
    contract, problems = load_registry(registry)
    if contract is None:
        print_findings(problems)
        raise typer.Exit(3)
    body = {
        "version": 1,
        "registry": registry.name,
        "contract_sha256": contract.contract_sha256,
        "tools": dict(sorted(contract.tool_hashes().items())),
    }
    target = registry.parent / LOCK_NAME
    tmp = target.with_suffix(".lock.tmp")
    tmp.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(target)
    sys.stderr.write(f"wrote {display_path(target)} ({len(body['tools'])} tools)\n")


def tools(
    registry: Path = typer.Argument(..., help="Registry YAML file."),
    subagent: Optional[str] = typer.Option(None, "--subagent", "-s", help="Only this subagent's tools."),
    format: DataFormat = typer.Option(DataFormat.auto, "--format", "-f", help="auto, table, jsonl or json."),
) -> None:
    """List the registry's tools: id, kind, effect, description."""
    from ..contract.registry import load_registry
    from .common import print_findings, record_writer

    _require_file(registry, "registry")
    contract, problems = load_registry(registry)
    if contract is None:
        print_findings(problems)
        raise typer.Exit(3)
    if subagent is not None and subagent not in contract.subagents:
        from .._text import listing, quoted

        fail(f"unknown subagent {quoted(subagent)}", 2, f"subagents: {listing(sorted(contract.subagents))}")
    from ..contract.mcp import resolve_server_tools

    out = sys.stdout.buffer
    writer = record_writer(resolve_format(format, sys.stdout), out)
    for sid, sub in contract.subagents.items():
        if subagent is not None and sid != subagent:
            continue
        # MCP tools: descriptions from their servers (a server that cannot start is a finding)
        server_problems = resolve_server_tools(sub)
        if server_problems:
            print_findings(server_problems)
        for tid, t in sub.tools.items():
            writer.write({
                "type": "tool", "subagent": sid, "tool": tid, "kind": t.kind, "effect": t.effect,
                "allowed": tid in sub.allowed_tools, "description": t.description,
                "mcp_name": t.ref if t.kind == "mcp" else None,
            })
    writer.close()


class SchemaName(str, Enum):
    registry = "registry"
    plan = "plan"
    receipt = "receipt"


def schema(name: SchemaName = typer.Argument(..., help="registry, plan or receipt.")) -> None:
    """Print the JSON Schema of a file format or of the output records."""
    from ..record_schema import SCHEMAS

    sys.stdout.write(json.dumps(SCHEMAS[name.value](), indent=2) + "\n")
