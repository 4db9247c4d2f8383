"""Answering a call that waits for a person, shared by ``toolloop approve`` and ``toolloop serve``:
the tool a pending call belongs to (the only step that loads the run's registry, and so imports
the App) and edited arguments checked against its input schema. The answer itself is the
journal's compare-and-set, ``Store.answer_approval``: whoever answers first wins, once.

Edited arguments may keep the ``"[REDACTED]"`` marker where the request showed it: that field
keeps the value it had (the run rebuilds it on resume), so its schema is not checked here. A new
value typed into a redacted field is never stored (``stored_edit``): the journal keeps the marker
in its place, and ``resume`` makes that call ``interrupted`` rather than run it without it.
"""

from __future__ import annotations

from typing import Any

REDACTED = "[REDACTED]"


def tool_for_call(store: Any, run: dict, item_key: str | None, call_key: str) -> Any:
    """The ``ToolSpec`` of a run's call (a routed run's call key is its turn, whose decision names
    the tool), from the run's registry compiled again; None when it cannot be read any more."""
    from .contract.registry import load_registry

    tool_id = next((tool for _seq, _lane, i, ck, tool, _a, _s in store.calls_of(run["run_id"])
                    if ck == call_key and (i or None) == (item_key or None)), None)
    if tool_id is None and run["mode"] == "routed":
        tool_id = next((rec.get("tool") for _before, rec in store.records_of(run["run_id"])
                        if rec.get("type") == "decision" and str(rec.get("iteration")) == call_key), None)
    options = run["options"] or {}
    contract, _ = load_registry(run["registry_path"], default_timeout_s=options.get("default_timeout_s"),
                                app_root=options.get("app_root"))
    sub = contract.subagents.get(options.get("subagent", "")) if contract is not None else None
    return sub.tools.get(tool_id) if sub is not None and tool_id is not None else None


def kept_markers(shown: Any, edited: Any, at: tuple = ()) -> list[tuple]:
    """Paths where the arguments as shown hold the redaction marker and the edit keeps it."""
    if shown == REDACTED and edited == REDACTED:
        return [at]
    if isinstance(shown, dict) and isinstance(edited, dict):
        return [p for k in shown if k in edited for p in kept_markers(shown[k], edited[k], at + (k,))]
    if isinstance(shown, list) and isinstance(edited, list):
        return [p for i, (s, e) in enumerate(zip(shown, edited)) for p in kept_markers(s, e, at + (i,))]
    return []


def edit_problem(tool: Any, edited: Any, shown: Any = None, limit: int = 3) -> str | None:
    """Why edited arguments fail the tool's input schema, or None when they pass; fields that keep
    the marker where ``shown`` (the request's arguments) held it are not checked."""
    from ._text import clip_quoting, excerpt
    from ._json import dumps

    if not isinstance(edited, dict):
        return "arguments must be a JSON object"
    validator = tool.input_validator
    if validator is None:
        return None
    kept = kept_markers(shown, edited) if shown is not None else []
    out = []
    for err in validator.iter_errors(edited):
        path = tuple(err.instance_path)
        if any(path[:len(k)] == k for k in kept):
            continue
        try:
            quoted_value = dumps(err.instance).decode()
        except TypeError:
            quoted_value = ""
        message = clip_quoting(err.message, quoted_value)
        where = excerpt("/" + "/".join(str(p) for p in path))
        out.append(f"at {where}: {message}" if path else message)
        if len(out) >= limit:
            break
    return "; ".join(out) or None


def stored_edit(tool: Any, edited: Any) -> tuple[Any, list[str]]:
    """Edited arguments as the journal may keep them: every value at a redacted pointer replaced
    by the marker. Also the pointers where the edit typed a new value (not the marker): such an
    answer cannot be acted on by another process, which never sees the value."""
    from .engine.redact import Redactor

    red = Redactor(tool.redact)
    if not red.active:
        return edited, []
    typed = [p for p in tool.redact if any(v != REDACTED for v in Redactor([p]).secrets(edited))]
    return red.apply(edited), typed


def withheld_note(typed: list[str], run_id: str) -> str:
    """What a person is told when an edit typed a new value into a redacted field."""
    from ._text import excerpt

    where = ", ".join(excerpt(p) for p in typed)
    return (f"the new value at {where} is a redacted field's and is never stored, so resume makes this call"
            f" interrupted instead of running it; to give it a new value, answer at a terminal:"
            f" toolloop resume {run_id} --retry-interrupted asks again")
