"""A registry with broken parts: what is left out so that the rest is still checked, and what
was left out, so that checks of the rest do not report consequences of the same mistake."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .problems import Collector, did_you_mean

if TYPE_CHECKING:  # the models load only for a registry with broken parts
    from .models import RegistryDecl


@dataclass
class Partial:
    """What was left out of a registry with broken parts, so that checks of the rest do not
    report consequences of the same mistake twice."""

    left_out_tools: dict[str, set[str]] = field(default_factory=dict)
    unknown_defaults: set[str] = field(default_factory=set)
    skip_evidence: bool = False
    misspelled: dict[tuple[str, str], set[str]] = field(default_factory=dict)  # (subagent, tool) -> fields


def drop_consequences(col: Collector, refused: list[str]) -> None:
    """A value refused while loading is null in the data: structure findings at or below it
    only repeat the same mistake."""
    def below(path: str) -> bool:
        return any(path == r or path.startswith((r + ".", r + "[")) for r in refused)

    col.problems[:] = [p for p in col.problems if not (p.code.startswith("TL2") and below(p.path))]


def salvage(data: dict, broken: list[tuple], partial: Partial) -> RegistryDecl | None:
    """The declaration without the broken tools, runner_defaults and unknown keys, or None
    when what is broken is needed to check anything else (subagents, app_root)."""
    top, subs = _copied(data)
    for loc in broken:
        if not loc:
            return None
        head = loc[0]
        if head == "version":
            top["version"] = 1
        elif head in ("app_root",) or (head == "subagents" and (len(loc) == 1 or subs is None)):
            return None
        elif head != "subagents":
            top.pop(head, None)
            partial.skip_evidence = partial.skip_evidence or head == "evidence"
        else:
            _leave_out_in_subagent(subs, loc, partial)  # type: ignore[arg-type]  # not None here
    from pydantic import ValidationError

    from .models import RegistryDecl

    try:
        return RegistryDecl.model_validate(top)
    except ValidationError:
        return None


def _copied(data: dict) -> tuple[dict, dict | None]:
    """The top level, its subagents, each subagent and its tools copied (what salvage changes)."""
    top = dict(data)
    subs = dict(top["subagents"]) if isinstance(top.get("subagents"), dict) else None
    if subs is not None:
        top["subagents"] = subs
        for sid, sub in subs.items():
            if isinstance(sub, dict):
                subs[sid] = dict(sub)
                if isinstance(sub.get("tools"), dict):
                    subs[sid]["tools"] = dict(sub["tools"])
    return top, subs


def _leave_out_in_subagent(subs: dict, loc: tuple, partial: Partial) -> None:
    """``subagents.SID...`` is broken: leave out the subagent, its tool, or its key."""
    sid = loc[1]
    sub = subs.get(sid)
    if not isinstance(sub, dict) or len(loc) == 2:
        subs.pop(sid, None)
        return
    key = loc[2]
    if key == "tools":
        if len(loc) == 3 or not isinstance(sub.get("tools"), dict):
            subs.pop(sid, None)
        else:
            _leave_out_tool(sub["tools"], str(sid), loc, partial)
    elif key == "runner_defaults":
        sub.pop("runner_defaults", None)
        partial.unknown_defaults.add(str(sid))
    else:
        sub.pop(key, None)


def _leave_out_tool(tools: dict, sid: str, loc: tuple, partial: Partial) -> None:
    """``subagents.SID.tools.TID...`` is broken: drop an unknown key alone, else the tool."""
    from .models import ToolDecl

    tid = loc[3]
    tool = tools.get(tid)
    if (len(loc) == 5 and isinstance(tool, dict) and loc[4] not in ToolDecl.model_fields
            and str(tid) not in partial.left_out_tools.get(sid, set())):
        # an unknown key alone: check the rest of the tool without it (a misspelled
        # required key is then not reported missing as well)
        tools[tid] = {k: v for k, v in tool.items() if k != loc[4]}
        near = did_you_mean(str(loc[4]), ToolDecl.model_fields)
        if near is not None:
            partial.misspelled.setdefault((sid, str(tid)), set()).add(near)
        return
    tools.pop(tid, None)
    partial.left_out_tools.setdefault(sid, set()).add(str(tid))
