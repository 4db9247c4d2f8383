"""``toolloop.lock``: the reviewed contract of every registry in a folder.

One lock per folder, one entry per registry file of that folder (keyed by file name), each with
every tool's contract hash, each subagent's ``runner_defaults`` hash (allowlist, call limits,
timeouts) and a hash of the registry's own settings (``app_root``, ``evidence``). ``validate
--locked`` reports any difference as drift (TL370), so a change to what runs needs a new lock
in the same change. Locks written before there were entries per file (one registry, tools only)
are still read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .._canonical import sha256_of
from ..contract.problems import Problem

LOCK_NAME = "toolloop.lock"
LOCK_VERSION = 2


def lock_entry(contract: Any) -> dict:
    """What the lock records for one compiled registry."""
    decl = contract.decl
    return {
        "contract_sha256": contract.contract_sha256,
        "settings": sha256_of(_settings(decl)),
        "subagents": {sid: sha256_of(sub.runner_defaults.model_dump(mode="json", exclude_unset=True))
                      for sid, sub in sorted(decl.subagents.items())},
        "tools": dict(sorted(contract.tool_hashes().items())),
    }


def _settings(decl: Any) -> dict:
    return {k: v for k, v in decl.model_dump(mode="json", exclude_unset=True).items() if k != "subagents"}


def read_lock(path: Path) -> dict[str, dict]:
    """Entries by registry file name. Raises OSError / ValueError when unreadable."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if "registries" in data:
        entries = data["registries"]
        if not isinstance(entries, dict) or not all(isinstance(e, dict) and isinstance(e.get("tools"), dict)
                                                   for e in entries.values()):
            raise ValueError("'registries' is not a mapping of entries with 'tools'")
        return entries
    # the first layout: one registry, tool hashes only
    if not isinstance(data.get("tools"), dict) or not isinstance(data.get("registry"), str):
        raise ValueError("neither 'registries' nor 'registry' and 'tools'")
    return {data["registry"]: {"tools": data["tools"]}}


def write_lock(registry: Path, contract: Any, mcp: dict[str, str] | None = None) -> tuple[Path, dict]:
    """Write (or update) the entry of ``registry`` in its folder's lock, keeping the entries of
    the other registries there; returns the lock's path and the entry. ``mcp`` are the schema
    hashes of its MCP tools ("subagent/tool" -> hash, see ``contract/mcp.py``), checked by ``run``
    and ``validate`` whenever the lock exists."""
    target = registry.parent / LOCK_NAME
    try:
        entries = read_lock(target)
    except FileNotFoundError:
        entries = {}
    except (OSError, ValueError):
        entries = {}  # an unreadable lock is replaced; validate --locked said so (TL371)
    entry = lock_entry(contract)
    if mcp:
        entry["mcp"] = dict(sorted(mcp.items()))
    entries[registry.name] = entry
    body = {"version": LOCK_VERSION, "registries": dict(sorted(entries.items()))}
    tmp = target.with_suffix(".lock.tmp")
    tmp.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(target)
    return target, entry


def drift(registry: Path, contract: Any) -> list[Problem]:
    """TL370 for every tool, subagent default and setting that changed since the lock was
    written, at its place in the registry; TL371 when there is no readable entry."""
    from .._text import quoted
    from ..contract.problems import json_path
    from ..contract.registry import display_path, load_document

    lock_path = registry.parent / LOCK_NAME
    shown, reg_shown = display_path(lock_path), display_path(registry)
    relock = f"run 'toolloop lock {registry}'"
    try:
        entries = read_lock(lock_path)
    except FileNotFoundError:
        return [Problem("TL371", f"{shown} does not exist", reg_shown, hint=f"{relock} and commit {LOCK_NAME}")]
    except (OSError, ValueError) as exc:
        from .._text import clip

        return [Problem("TL371", f"{shown} is unreadable: {clip(str(exc))}", shown, hint=f"{relock} again")]
    locked = entries.get(registry.name)
    if locked is None:
        return [Problem("TL371", f"{shown} has no entry for {registry.name}", reg_shown,
                        hint=f"{relock} and commit {LOCK_NAME}")]
    smap = load_document(registry).smap
    now = lock_entry(contract)
    out: list[Problem] = []

    def add(message: str, path: tuple) -> None:
        line, col = smap.position(path, at_key=True)
        out.append(Problem("TL370", message, smap.file, line, col, json_path(path),
                           hint=f"review the change, then {relock}"))

    if "settings" in locked and locked["settings"] != now["settings"]:
        add(f"the registry's settings (app_root, evidence) changed since {shown} was written", ())
    locked_subs = locked.get("subagents")
    for sid, digest in now["subagents"].items():
        if locked_subs is None:
            add(f"runner_defaults of subagent {quoted(sid)} are not in {shown} (written by an older toolloop)",
                ("subagents", sid))
        elif sid not in locked_subs:
            add(f"subagent {quoted(sid)} is not in {shown} (added since the lock was written)", ("subagents", sid))
        elif locked_subs[sid] != digest:
            add(f"runner_defaults of subagent {quoted(sid)} (allowed_tools, max_calls, timeouts) changed since"
                f" {shown} was written", ("subagents", sid, "runner_defaults"))
    for sid in sorted(set(locked_subs or {}) - set(now["subagents"])):
        add(f"subagent {quoted(sid)} is in {shown} but no longer in the registry", ("subagents",))
    locked_tools, current = locked["tools"], now["tools"]
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
        add(msg, ("subagents", sid, "tools", tid))
    return out
