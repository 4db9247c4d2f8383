"""Pending approval requests as records (``approval_request``) for ``approvals list`` and
``runs show``: the run, the call's keys, its tool and effect, and its exact arguments as written
everywhere else (redacted).

Read from the journal and the run's own files only, without compiling the registry (no App code
is imported): the tool's effect and redaction come from the registry file as written, and
arguments the journal withheld because they hold a redacted value are read again from the plan
file and shown redacted. Arguments that cannot be read again (lanes from standard input, a lane
payload fed at run time) are ``null`` with ``args_withheld: true``. A routed run's request (its
call key is the turn) takes its tool and arguments from that turn's decision record, which the
journal holds redacted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .receipts import rfc3339, taint_text


class _Files:
    """The registry and plan files of runs, each read once."""

    def __init__(self) -> None:
        self._docs: dict[str, Any] = {}

    def doc(self, path: str | None) -> Any:
        if not path or path.startswith("<"):
            return None
        if path not in self._docs:
            from .contract.registry import load_document

            self._docs[path] = load_document(path).data if Path(path).is_file() else None
        return self._docs[path]

    def tool(self, registry: str, subagent: str | None, tool: str | None) -> dict:
        doc = self.doc(registry)
        try:
            tools = doc["subagents"][subagent]["tools"]
        except (TypeError, KeyError):
            return {}
        found = tools.get(tool) if isinstance(tools, dict) else None
        if found is None and tool and "." in tool:  # one of several tools of an MCP server: '<id>.<name>'
            found = tools.get(tool.split(".", 1)[0])
        return found if isinstance(found, dict) else {}

    def plan_args(self, plan: str, lane: int | None, item_key: str | None, call_key: str) -> Any:
        """The arguments a plan file gives a call, or None when it does not hold the call."""
        doc = self.doc(plan)
        if not isinstance(doc, dict):
            return None
        if item_key is None:
            calls = doc.get("calls")
        else:
            lanes = doc.get("lanes") or []
            lane_decl = lanes[lane] if isinstance(lanes, list) and lane is not None and lane < len(lanes) else None
            if not isinstance(lane_decl, dict) or lane_decl.get("item_key") != item_key:
                return None
            calls = lane_decl.get("calls")
        for i, call in enumerate(calls if isinstance(calls, list) else []):
            if isinstance(call, dict) and str(call.get("call_key", i)) == call_key:
                args = call.get("args")
                return args if isinstance(args, dict) else None
        return None


def _redacted(args: Any, tool: dict) -> Any:
    from .contract.schemas import write_only_pointers
    from .engine.redact import Redactor

    pointers = [p for p in tool.get("redact") or [] if isinstance(p, str)]
    for key in ("input_schema", "output_schema"):
        schema = tool.get(key)
        if isinstance(schema, dict):
            pointers += write_only_pointers(schema)
    return Redactor(pointers).apply(args)


def request_records(rows: list[dict]) -> list[dict]:
    """``approval_request`` records for rows of ``Store.pending_requests``."""
    files = _Files()
    out = []
    for row in rows:
        options = row.get("options") or {}
        tool = files.tool(row["registry_path"], options.get("subagent"), row["tool"])
        args, withheld = row["args"], False
        if args is None:
            rebuilt = files.plan_args(row["plan_path"], row["lane"], row["item_key"], row["call_key"])
            if rebuilt is None:
                withheld = True
            else:
                args = _redacted(rebuilt, tool)
        effect = tool.get("effect", "read") if row["tool"] is not None else None
        gate = tool.get("approval")
        taint = _taint(options, row, tool)
        out.append({
            "type": "approval_request",
            "run_id": row["run_id"],
            "item_key": row["item_key"],
            "call_key": row["call_key"],
            "seq": row["seq"],
            "tool": row["tool"],
            "effect": effect,
            "approval": (tool.get("approval") or {}).get("when") if isinstance(tool.get("approval"), dict) else None,
            "args": args,
            "args_withheld": withheld,
            "args_sha256": row["args_sha256"],
            "requested_at": rfc3339(row["requested_at"]),
            # what gated the call: the taint ("after untrusted content from TOOL at turn N"), or its own gate
            "reason": taint_text(taint) if taint is not None else
            ("approval: required" if gate == "required" else f"approval.when: {gate.get('when')}"
             if isinstance(gate, dict) else None),
            "taint": taint,
        })
    return out


def _taint(options: dict, row: dict, tool: dict) -> dict | None:
    """The run's ``tainted_by`` when this request is a taint gate: a routed run's call (its key
    the turn) that may write, proposed after the run was shown untrusted content (a child run's
    inherited taint holds from its first turn), as the journaled fact says."""
    journaled = options.get("taint") if isinstance(options, dict) else None
    source = journaled.get("tainted_by") if isinstance(journaled, dict) else None
    if not isinstance(source, dict) or row["item_key"] is not None or not str(row["call_key"]).isdigit():
        return None
    # the registry file's effect; a plan tool's or an MCP tool's without one is known only at run time
    if tool.get("effect", "read" if "callable" in tool else "write") not in ("write", "destructive"):
        return None
    if journaled.get("inherited") or int(row["call_key"]) > int(source.get("iteration") or 0):
        return source
    return None


def pending_records(store: Any, run_id: str | None = None) -> list[dict]:
    """``approval_request`` records of the requests pending now (of one run, or of all), read
    from ``store`` (a ``Store``)."""
    rows = store.pending_requests(run_id)
    decisions: dict[str, dict[str, dict]] = {}
    for row in rows:
        if row["tool"] is not None or row["item_key"] is not None:
            continue
        rid = row["run_id"]
        if rid not in decisions:  # a routed run: its requests are turns
            decisions[rid] = {str(rec.get("iteration")): rec for _before, rec in store.records_of(rid)
                              if rec.get("type") == "decision" and rec.get("action") == "call"}
        decision = decisions[rid].get(row["call_key"])
        if decision is not None:
            row["tool"] = decision.get("tool")
            row["args"] = decision.get("args")
    return request_records(rows)
