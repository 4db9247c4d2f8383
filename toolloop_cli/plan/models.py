"""Declaration types for plan files (SPEC 3). Every mapping is closed."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import Field, StrictStr

from ..contract.models import Closed, Schema

MODE_KEYS = {
    "sequential": {"calls"},
    "parallel": {"lanes", "max_concurrency"},
    "routed": {"goal", "context", "allowed_tools", "router_profile", "final_profile", "budget",
               "final_schema", "supervisor"},
}


class CallDecl(Closed):
    tool: StrictStr
    call_key: Optional[StrictStr] = None
    args: Optional[dict[str, Any]] = None


class LaneDecl(Closed):
    item_key: StrictStr
    calls: Annotated[list[CallDecl], Field(min_length=1)]
    payload: Optional[dict[str, Any]] = None


class ProfileDecl(Closed):
    provider: StrictStr
    model: StrictStr
    base_url: Optional[StrictStr] = None
    api_key_env: Optional[StrictStr] = None
    temperature: Optional[float] = None
    max_output_tokens: Optional[Annotated[int, Field(ge=1)]] = None
    fixture: Optional[StrictStr] = None  # replay provider: a recorded answers file


class BudgetDecl(Closed):
    max_iterations: Annotated[int, Field(ge=1)]
    max_tokens: Annotated[int, Field(ge=1)]
    max_tool_calls: Annotated[int, Field(ge=0)]
    timeout_s: Annotated[float, Field(gt=0)]


class RuleDecl(Closed):
    when: Literal["tool_repeated", "budget_fraction", "iteration_reached", "effect_count"]
    count: Optional[Annotated[int, Field(ge=1)]] = None
    tool: Optional[StrictStr] = None
    gt: Optional[float] = None
    gte: Optional[Annotated[int, Field(ge=1)]] = None
    effect: Optional[Literal["read", "write", "destructive"]] = None


class SupervisorDecl(Closed):
    rules: list[RuleDecl] = []
    on_violation: Literal["abort", "pause", "steer"] = "abort"
    steer_message: Optional[StrictStr] = None


class PlanDecl(Closed):
    """A plan file: which subagent, which mode, and the mode's calls, lanes or goal."""

    version: Literal[1]
    registry: Optional[StrictStr] = None
    subagent: StrictStr
    mode: Literal["sequential", "parallel", "routed"]
    calls: Optional[list[CallDecl]] = None
    max_concurrency: Optional[int] = None
    lanes: Optional[list[LaneDecl]] = None
    goal: Optional[StrictStr] = None
    context: Optional[dict[str, Any]] = None
    allowed_tools: Optional[list[StrictStr]] = None
    router_profile: Optional[ProfileDecl] = None
    final_profile: Optional[ProfileDecl] = None
    budget: Optional[BudgetDecl] = None
    final_schema: Optional[Schema] = None
    supervisor: Optional[SupervisorDecl] = None
