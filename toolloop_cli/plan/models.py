"""Declaration types for plan files. Every mapping is closed."""

# no `from __future__ import annotations`: pydantic would compile every field's annotation
# from its text when the classes are built, a cost every command that loads a file pays
from typing import Annotated, Any, Literal, Optional

from pydantic import Field, StrictStr

from .._plugins import plugins_back, plugins_off
from ..contract.models import Closed, NotifyDecl, Schema
from ..contract.quick import MODE_KEYS  # noqa: F401 - where the plan's checks have always found it
from ..router.supervisor import RULES

_plugins = plugins_off()  # the classes below are built without pydantic's plugin loader


class CallDecl(Closed):
    tool: StrictStr
    call_key: Optional[StrictStr] = None
    args: Optional[dict[str, Any]] = None


class LaneDecl(Closed):
    item_key: StrictStr
    calls: Annotated[list[CallDecl], Field(min_length=1)]
    payload: Optional[dict[str, Any]] = None


class PriceDecl(Closed):
    input_per_mtok: Annotated[float, Field(ge=0)]
    output_per_mtok: Annotated[float, Field(ge=0)]


class ProfileDecl(Closed):
    provider: StrictStr
    model: Optional[StrictStr] = None  # required except for replay
    base_url: Optional[StrictStr] = None
    api_key_env: Optional[StrictStr] = None
    temperature: Optional[float] = None
    max_output_tokens: Optional[Annotated[int, Field(ge=1)]] = None
    price: Optional[PriceDecl] = None
    fixture: Optional[StrictStr] = None  # replay provider: recorded answers, relative to the plan


class BudgetDecl(Closed):
    max_iterations: Annotated[int, Field(ge=1)]
    max_tokens: Annotated[int, Field(ge=1)]
    max_tool_calls: Annotated[int, Field(ge=0)]
    timeout_s: Annotated[float, Field(gt=0)]
    max_cost_usd: Optional[Annotated[float, Field(gt=0)]] = None
    on_exceeded: Literal["end", "pause"] = "end"  # pause: a budget that runs out pauses the run (resume --raise)


class RuleDecl(Closed):
    when: Literal[tuple(RULES)]  # type: ignore[valid-type]  # the kinds of router/supervisor.RULES
    count: Optional[Annotated[int, Field(ge=0)]] = None
    tool: Optional[StrictStr] = None
    gt: Optional[Annotated[float, Field(ge=0, lt=1)]] = None
    gte: Optional[Annotated[int, Field(ge=1)]] = None
    effect: Optional[Literal["read", "write", "destructive"]] = None
    steer_message: Optional[StrictStr] = None  # this rule's own, used instead of the supervisor's when it steers


class JudgeDecl(Closed):
    profile: ProfileDecl
    prompt: StrictStr  # a file, relative to the plan


class SupervisorDecl(Closed):
    rules: list[RuleDecl] = []
    judge: Optional[JudgeDecl] = None
    every_n_iterations: Annotated[int, Field(ge=1)] = 1
    on_violation: Optional[Literal["abort", "pause", "steer"]] = None
    on_judge_error: Literal["ignore", "pause", "abort"] = "ignore"
    steer_message: Optional[StrictStr] = None


class GuardrailsDecl(Closed):
    observations: list[StrictStr] = []
    final: list[StrictStr] = []


class TaintDecl(Closed):
    """What a routed run does with a write or destructive call its model proposes after it was
    shown untrusted content: gate it for a person (``approve``), refuse it (``deny``), or let it
    run (``allow``); its receipt carries ``taint`` whichever."""

    on_write: Literal["approve", "deny", "allow"] = "approve"


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
    instructions: Optional[StrictStr] = None  # a file, relative to the plan
    inputs: Optional[Schema] = None  # the schema of `context`
    outcomes: Optional[Annotated[list[StrictStr], Field(min_length=1)]] = None
    routes: Optional[dict[str, StrictStr]] = None
    guardrails: Optional[GuardrailsDecl] = None
    taint: Optional[TaintDecl] = None  # routed: writes after untrusted content
    notify: Optional[NotifyDecl] = None  # overrides the subagent's runner_defaults.notify


plugins_back(_plugins)
