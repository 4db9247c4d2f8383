"""What a run stores of the contract it used, so ``runs show --contract`` can print it after the
registry file changed or went away.

``registry`` is the registry declaration as data (the keys it sets), exactly what
``contract_sha256`` is the hash of (canonical JSON), so the snapshot can be checked against the hash. MCP tools add what their servers
said at admission (description, schemas, annotations) and the effect the run gave them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._canonical import sha256_of
from .compiled import Contract


def contract_snapshot(contract: Contract, children: Mapping[str, Contract] | None = None) -> dict:
    """The snapshot of ``contract``; ``children``: the contracts of the child plans its ``plan:``
    tools may run (by plan path), whose MCP tools' offers are kept under ``child_mcp_tools`` (a
    child plan the run never calls has no snapshot of its own)."""
    registry: Any = contract.decl.model_dump(mode="json", exclude_unset=True) if contract.decl is not None else None
    snapshot = {
        "contract_sha256": contract.contract_sha256,
        "registry_file": contract.file,
        "app_root": contract.app_root,
        "registry": registry,
        "mcp_tools": _mcp_tools(contract),
    }
    offers = {path: found for path, child in sorted((children or {}).items())
              if (found := {name: t["offered"] for name, t in _mcp_tools(child).items() if "offered" in t})}
    if offers:
        snapshot["child_mcp_tools"] = offers
    return snapshot


def _mcp_tools(contract: Contract) -> dict:
    mcp_tools = {}
    for sub in contract.subagents.values():
        for t in sub.tools.values():
            if t.kind != "mcp":
                continue
            mcp_tools[f"{sub.id}/{t.id}"] = {
                "server_tool": t.ref,
                "description": t.description,
                "input_schema": t.input_schema,
                "output_schema": t.output_schema,
                "effect": t.effect,
                "idempotent": t.idempotent,
            }
            if t.offered is not None:  # what the server offered, as it listed it
                mcp_tools[f"{sub.id}/{t.id}"]["offered"] = t.offered
    return mcp_tools


def snapshot_matches(snapshot: dict) -> bool:
    """Whether the stored declaration still hashes to the stored contract hash."""
    return snapshot.get("registry") is not None and sha256_of(snapshot["registry"]) == snapshot.get("contract_sha256")
