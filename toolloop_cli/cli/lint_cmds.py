"""validate, tools, schema, lock: commands about the contract itself."""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import List, NoReturn, Optional

import typer

from .common import DataFormat, LintFormat, fail, require_file, resolve_format, version

LOCK_NAME = "toolloop.lock"  # the same as lint.lockfile.LOCK_NAME, without importing it at start-up


def _require_file(path: Path, what: str) -> None:
    require_file(path, what)


def validate(
    paths: List[Path] = typer.Argument(..., metavar="PATH", help="Registries, plans, suites, or folders holding them (*.yml, *.yaml)."),
    registry: Optional[Path] = typer.Option(None, "--registry", metavar="FILE", help="Check every plan against this registry instead of the one it names."),
    app_root: Optional[Path] = typer.Option(None, "--app-root", metavar="DIR", help="Folder put first on sys.path for callables (as run --app-root)."),
    format: LintFormat = typer.Option(LintFormat.text, "--format", "-f", metavar="text|json|github|sarif", help="Output format for findings."),
    locked: bool = typer.Option(False, "--locked", help=f"Fail when a registry differs from its {LOCK_NAME}."),
    strict: bool = typer.Option(False, "--strict", help="Treat warnings as errors."),
    ignore: Optional[str] = typer.Option(None, "--ignore", metavar="CODES", help="Finding codes to leave out, e.g. TL305,TL340."),
    timeout: Optional[float] = typer.Option(None, "--timeout", metavar="SECONDS", help="The --timeout the plans will run with (a default for tools that set none)."),
    max_concurrency: Optional[int] = typer.Option(None, "--max-concurrency", "-j", metavar="N", help="The --max-concurrency the parallel plans will run with."),
) -> None:
    """Check registries, plans and suites as run would, without running anything; exit 1 on any error.

    Each plan is admitted against the registry it names (or --registry), with the flags it will
    be run with, so a plan that passes is never rejected by run on the same files."""
    from ..errors import UsageError
    from ..render.lint import render

    try:
        report, dropped, strict = _validate(paths, registry, app_root, locked, strict, ignore, timeout, max_concurrency)
    except UsageError as exc:
        usage_error(str(exc), format.value)
    problems = report.problems
    if strict:
        from dataclasses import replace

        problems = [replace(p, level="error") for p in problems]
    notes = [f"{shown}: checked in part only: {why}" for shown, why in report.partly]
    for shown, tools in report.mcp_unchecked:  # validate reaches a server only for a plan or a lock
        from .._text import listing

        notes.append(f"{shown}: {len(tools)} MCP tool{'s' if len(tools) != 1 else ''} ({listing(tools, 5)}) not"
                     f" checked against {'their servers' if len(tools) != 1 else 'its server'}: validate a plan"
                     f" that uses {'them' if len(tools) != 1 else 'it'}, or run toolloop tools {shown},"
                     " to reach the servers")
    # only SARIF names the tool's version: reading it imports importlib.metadata and searches the
    # installed distributions, a cost of every validate otherwise
    shown_version = version() if format is LintFormat.sarif else ""
    sys.stdout.write(render(problems, format.value, shown_version, notes=notes))
    from .._text import escape

    for note in notes:  # on standard error in every format, so a CI log shows them too
        sys.stderr.write(escape(note) + "\n")
    if format is LintFormat.text:
        sys.stderr.write(count_line(report.registries, report.plans, problems, dropped, len(report.partly),
                                    suites=report.suites) + "\n")
    if any(p.level == "error" for p in problems):
        raise typer.Exit(1)


def _validate(paths: List[Path], registry: Optional[Path], app_root: Optional[Path], locked: bool, strict: bool,
              ignore: Optional[str], timeout: Optional[float], max_concurrency: Optional[int]):  # noqa: ANN202
    from ..errors import UsageError
    from ..lint.check import Checker, Flags
    from ..lint.discover import discover
    from ..lint.suppress import Suppressor, load_settings, parse_codes

    if timeout is not None and timeout <= 0:
        raise UsageError("--timeout must be above 0")
    if max_concurrency is not None and max_concurrency < 1:
        raise UsageError(f"-j/--max-concurrency {max_concurrency}: at least one lane must run at a time (use 1 or more)")
    from .._paths import look_at
    from .._text import excerpt

    if registry is not None and (looked := look_at(registry)).kind != "file":
        why = {"folder": "a folder, not a file", "missing": "not found"}.get(looked.kind, looked.why)
        raise UsageError(f"--registry {excerpt(str(registry))}: {why}")
    if app_root is not None and (looked := look_at(app_root)).kind != "folder":
        why = looked.why if looked.kind == "bad" else "not a folder"
        raise UsageError(f"--app-root {excerpt(str(app_root))}: {why}")
    settings = load_settings()
    codes = settings.ignore | (parse_codes(ignore, "--ignore") if ignore is not None else frozenset())
    found = discover(paths)
    checker = Checker(Flags(str(registry) if registry else None, str(app_root) if app_root else None, timeout,
                            max_concurrency, locked))
    report = checker.check(found.targets)
    report.problems = sorted(found.problems + report.problems, key=lambda p: p.sort_key)
    suppressor = Suppressor(codes)
    report.problems = suppressor.keep(report.problems)
    return report, suppressor.dropped, strict or settings.strict


def count_line(registries: int, plans: int, problems: list, dropped: int, partly: int = 0, suites: int = 0) -> str:
    """``checked 1 registry and 2 plans: 1 error, 2 warnings (3 ignored)``; plans that could not be
    checked fully are counted as such (``2 plans (1 of them in part only)``)."""

    from .._text import counted, joined

    shown_plans = counted(plans, "plan") + ("" if not partly else " in part only" if partly == plans
                                            else f" ({partly} of them in part only)")
    checked = joined([shown_plans if w == "plan" else counted(c, w, plural)
                      for c, w, plural in ((registries, "registry", "registries"), (plans, "plan", None),
                                           (suites, "suite", None)) if c]) or "nothing"
    errors = sum(p.level == "error" for p in problems)
    warnings = len(problems) - errors
    found = ", ".join(counted(c, w) for c, w in ((errors, "error"), (warnings, "warning")) if c) or "no problems"
    return f"checked {checked}: {found}" + (f" ({dropped} ignored)" if dropped else "")


def usage_error(message: str, fmt: str) -> NoReturn:
    """Exit 2 with the message on standard error; with --format sarif, standard output still
    gets a SARIF log that carries the error (code scanning then shows why nothing was checked)."""
    if fmt == "sarif":
        from ..render.lint import format_sarif

        sys.stdout.write(format_sarif([], version(), error=message))
    fail(message, 2)


def lock(registry: Path = typer.Argument(..., metavar="REGISTRY", help="Registry YAML file.")) -> None:
    """Write the registry's entry in toolloop.lock beside it: every tool's contract hash and each
    subagent's runner_defaults hash (other registries' entries in the same lock are kept)."""
    from ..contract.registry import display_path, load_registry
    from ..lint.lockfile import write_lock
    from .common import print_findings

    _require_file(registry, "registry")
    contract, problems = load_registry(registry)
    if contract is None:
        print_findings(problems)
        raise typer.Exit(3)
    from ..contract.mcp import hash_servers, listed, schema_hashes

    # each MCP tool's schemas, from its server (listed first, a step of its own)
    mcp_hashes, server_problems = schema_hashes(contract, listed(hash_servers(contract)))
    if any(p.level == "error" for p in server_problems):
        print_findings(server_problems)
        raise typer.Exit(3)
    target, entry = write_lock(registry, contract, mcp=mcp_hashes)
    from .._text import counted

    mcp = f", {counted(len(mcp_hashes), 'MCP schema')}" if mcp_hashes else ""
    sys.stderr.write(f"wrote {display_path(target)} ({registry.name}: {counted(len(entry['tools']), 'tool')},"
                     f" {counted(len(entry['subagents']), 'subagent')}{mcp})\n")


def tools(
    registry: Path = typer.Argument(..., metavar="REGISTRY", help="Registry YAML file."),
    subagent: Optional[str] = typer.Option(None, "--subagent", "-s", metavar="SUBAGENT", help="Only this subagent's tools."),
    format: DataFormat = typer.Option(DataFormat.auto, "--format", "-f", metavar="auto|table|jsonl|json", help="auto, table, jsonl or json."),
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
    from ..contract.mcp import discovered, resolve_server_tools

    out = sys.stdout.buffer
    writer = record_writer(resolve_format(format, sys.stdout), out)
    unreached = 0  # errors from servers that could not be reached: the listing is partial (exit 1)
    servers: dict = {}  # what the MCP servers listed so far offer
    for sid, sub in contract.subagents.items():
        if subagent is not None and sid != subagent:
            continue
        # MCP tools: descriptions from their servers (a server that cannot start is a finding)
        sub, server_problems = discovered(lambda found, sub=sub: resolve_server_tools(sub, found), servers)
        if server_problems:
            print_findings(server_problems)
            unreached += sum(p.level == "error" for p in server_problems)
        if any(t.kind == "plan" for t in sub.tools.values()):  # a plan tool's effect comes from its child plan
            from ..plan.children import admit_children

            _c, sub, _plans, child_problems = discovered(lambda found, sub=sub: admit_children(
                contract, sub, usable=set(sub.tools), depth=0, max_depth=sub.max_depth, servers=found), servers)
            if child_problems:
                print_findings(child_problems)
        for tid, t in sub.tools.items():
            writer.write({
                "type": "tool", "subagent": sid, "tool": tid, "kind": t.kind, "effect": t.effect,
                "allowed": tid in sub.allowed_tools, "description": t.description,
                "mcp_name": t.ref if t.kind == "mcp" else None,
            })
    writer.close()
    if unreached:
        sys.stderr.write(f"toolloop: {unreached} MCP problem{'s' if unreached != 1 else ''} above: the tools of"
                         " a server that could not be reached are not listed\n")
        raise typer.Exit(1)


class SchemaName(str, Enum):
    registry = "registry"
    plan = "plan"
    receipt = "receipt"
    suite = "suite"


def schema(name: SchemaName = typer.Argument(..., metavar="registry|plan|suite|receipt", help="registry, plan, suite or receipt.")) -> None:
    """Print the JSON Schema of a file format or of the output records."""
    from ..record_schema import SCHEMAS

    sys.stdout.write(json.dumps(SCHEMAS[name.value](), indent=2) + "\n")
