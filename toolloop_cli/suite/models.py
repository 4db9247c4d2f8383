"""Declaration types for suite files (``kind: suite``): cases, the faults laid over their tool
results and what each case expects. Every mapping is closed, like a plan's."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import Field, StrictBool, StrictStr

from ..contract.models import Closed

#: the expectations a batch (sequential or parallel) case may carry; the others need a routed run
BATCH_EXPECTATIONS = ("calls", "never", "max_tool_calls")


class CallExpect(Closed):
    """One receipt the run must hold, in order among the others (``args``: a subset)."""

    tool: StrictStr
    status: Optional[StrictStr] = None
    args: Optional[dict[str, Any]] = None


class ExpectDecl(Closed):
    """What a case's run must show; every key is optional and all given must hold."""

    outcome: Optional[StrictStr] = None
    route: Optional[StrictStr] = None
    final: Optional[dict[str, Any]] = None
    calls: Optional[list[CallExpect]] = None
    never: Optional[list[StrictStr]] = None
    max_tool_calls: Optional[Annotated[int, Field(ge=0, strict=True)]] = None
    max_tokens: Optional[Annotated[int, Field(ge=0, strict=True)]] = None
    max_cost_usd: Optional[Annotated[float, Field(ge=0)]] = None
    requests_unchanged: Optional[StrictBool] = None


class FaultDecl(Closed):
    """The ``call``-th call of ``tool`` (counted from 1) gets this status instead of its result."""

    tool: StrictStr
    call: Annotated[int, Field(ge=1, strict=True)]
    status: Literal["error", "timeout"]
    message: Optional[StrictStr] = None


class CaseDecl(Closed):
    name: StrictStr
    plan: StrictStr  # relative to the suite file
    fixture: Optional[StrictStr] = None  # a `runs export` file, relative to the suite file
    context: Optional[dict[str, Any]] = None  # replaces the plan's context
    tools: Literal["recorded", "live"] = "recorded"
    faults: Optional[list[FaultDecl]] = None
    expect: Optional[ExpectDecl] = None


class SuiteDecl(Closed):
    """A suite file: regression cases over plans and their recorded fixtures."""

    version: Literal[1]
    kind: Literal["suite"]
    cases: Annotated[list[CaseDecl], Field(min_length=1)]
