"""JSON Schemas of the file formats and output records (``toolloop schema ...``)."""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from .receipts import STATUSES, SUMMARY_STATUSES

Status = Literal[STATUSES]  # type: ignore[valid-type]
RFC3339 = Field(pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorRecord(_Record):
    kind: str
    message: str


class EnvelopeRecord(_Record):
    status: str
    decision: Literal["continue", "stop"]
    diagnosis: Optional[dict[str, Any]]
    handoff: dict[str, Any]


class ApprovalRecord(_Record):
    decision: Literal["approved", "edited", "rejected"]
    by: str
    at: str = RFC3339
    args_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class SandboxApplied(_Record):
    """The sandbox a call ran in, made with bwrap."""

    kind: Literal["bwrap"]
    network: Literal["none", "host"]
    writable: list[str]
    env: list[str]


class NoSandbox(_Record):
    """A tool with sandbox.required false whose sandbox could not be made: its calls ran unconfined."""

    kind: Literal["none"]
    reason: str


class TaintRecord(_Record):
    """What tainted a routed run: the first untrusted receipt its model was shown."""

    tool: str
    iteration: int = Field(ge=0)
    receipt_id: str


class ReceiptRecord(_Record):
    """One call's receipt."""

    type: Literal["receipt"]
    run_id: str
    seq: int = Field(ge=0)
    completion_seq: int = Field(ge=0)
    subagent: str
    tool: str
    parallel_batch_id: Optional[str]
    item_key: Optional[str]
    call_key: Optional[str]
    parent_receipt_id: Optional[str]
    iteration: Optional[int]
    receipt_id: str
    status: Status
    abandoned: bool
    attempts: int = Field(ge=0)
    cache: Literal["hit", "miss", "off"]
    args_sha256: Optional[str] = Field(pattern=r"^[0-9a-f]{64}$")
    args: Any
    result: Any
    error: Optional[ErrorRecord]
    envelope: Optional[EnvelopeRecord]
    started_at: Optional[str] = RFC3339
    finished_at: Optional[str] = RFC3339
    duration_ms: float = Field(ge=0)
    approval: Optional[ApprovalRecord]
    child_run_id: Optional[str]
    isolation: Optional[Union[SandboxApplied, NoSandbox]]
    taint: Optional[TaintRecord] = None  # a write or destructive call proposed after taint


class Tokens(_Record):
    input: int = Field(ge=0)
    output: int = Field(ge=0)


class PartSpend(_Record):
    tokens: int = Field(ge=0)
    cost_usd: Optional[float]


class ToolCounts(_Record):
    calls: int = Field(ge=0)
    ok: int = Field(ge=0)
    failed: int = Field(ge=0)


class LoopRecord(_Record):
    """The routed runner's state at the end of the run."""

    iterations: int = Field(ge=0)
    tool_calls: int = Field(ge=0)
    model_calls: int = Field(ge=0)
    tokens: Tokens
    cost_usd: Optional[float]
    rejections: dict[str, int]
    per_tool: dict[str, ToolCounts]
    by_part: dict[Literal["router", "final", "judge", "children"], PartSpend]


class ForkedFrom(_Record):
    """The recorded run a fork (``replay --from N``) took its first turns from, and N."""

    run_id: str
    iteration: int = Field(ge=1)


class Overshoot(_Record):
    """What a routed run's last reply charged past its own ``max_tokens`` and ``max_cost_usd``."""

    tokens: int = Field(ge=0)
    cost_usd: Optional[float] = Field(default=None, ge=0)


class SummaryRecord(_Record):
    """Always the last record of a run (run_id, mode and contract_sha256 are null only for a plan
    rejected before anything ran)."""

    type: Literal["summary"]
    run_id: Optional[str]
    mode: Optional[Literal["sequential", "parallel", "routed", "mcp"]]
    status: Literal[SUMMARY_STATUSES]  # type: ignore[valid-type]
    outcome: Optional[str]
    final: Any
    counts: dict[Status, int]
    duration_ms: float = Field(ge=0)
    contract_sha256: Optional[str]
    executor: Literal["local", "ray"]  # where calls of callables run: this process, or a Ray cluster
    labels: dict[str, str] = Field(default_factory=dict)  # run --label KEY=VALUE
    chain_sha256: Optional[str] = Field(default=None, pattern=r"^[0-9a-f]{64}$")  # head of the record chain
    rejected_lanes: Optional[int] = Field(default=None, ge=0)  # run --stream
    contract_changed: Optional[bool] = None  # resume --accept-contract-change
    parent_run_id: Optional[str] = None  # child runs
    parent_receipt_id: Optional[str] = None  # child runs
    route: Optional[str] = None  # routed runs
    loop: Optional[LoopRecord] = None  # routed runs
    # routed runs: why a run that ended other than final or paused ended (kind: the outcome's name)
    error: Optional[ErrorRecord] = None
    tainted_by: Optional[TaintRecord] = None  # routed runs: the first untrusted receipt shown
    # routed runs: what paused the run (kind: budget, approval, child, supervisor), or null
    paused_by: Optional[dict[str, Any]] = None
    # routed runs: tokens and dollars the last reply charged past max_tokens / max_cost_usd, or null
    overshoot: Optional[Overshoot] = None
    forked_from: Optional[ForkedFrom] = None  # replay --from N: the run and turn it was forked from


class DecisionRecord(_Record):
    """One routed-loop decision (a rejected one names the kind in ``rejected``)."""

    type: Literal["decision"]
    run_id: str
    iteration: int = Field(ge=1)
    action: Optional[Literal["call", "final", "abort"]]
    tool: Optional[str]
    args: Any
    reason: Optional[str]
    rejected: Optional[Literal["unknown_tool", "invalid_args", "duplicate", "over_budget", "malformed"]]
    tokens: Tokens
    model: str
    duration_ms: float = Field(ge=0)


class SupervisorRecord(_Record):
    """A supervisor rule hit, a judge's verdict or error, or an operator's steer or abort."""

    type: Literal["supervisor"]
    run_id: str
    iteration: int = Field(ge=0)
    rule: str
    action: Literal["abort", "pause", "steer", "continue", "raise"]
    reason: str
    by: Optional[str] = None  # who raised a budget (rule operator, action raise)


class GuardrailRecord(_Record):
    """An observation or final-answer guardrail that masked or blocked."""

    type: Literal["guardrail"]
    run_id: str
    iteration: int = Field(ge=0)
    guard: str
    tool: Optional[str]
    action: Literal["mask", "block"]
    reason: Optional[str]


class ModelAnswerRecord(_Record):
    """One model reply of a routed run (``runs export``; a replay fixture line)."""

    type: Literal["model_answer"]
    run_id: str
    n: int = Field(ge=0)
    role: Literal["router", "final", "judge"]
    model: str
    request_sha256: Optional[str]
    text: str
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    duration_ms: Optional[float] = None
    truncated: Optional[bool] = None  # true when the reply stopped at the output token limit
    request: Optional[str] = None  # the request's text, redacted (what requests_unchanged compares)


class TestFailure(_Record):
    """An expectation of a case that did not hold: its name (``final.refunded``, ``calls[1]``)."""

    expect: str
    wanted: Any
    got: Any


class TestRecord(_Record):
    """One case of a suite (``toolloop test``)."""

    type: Literal["test"]
    suite: str
    name: str
    status: Literal["pass", "fail", "error"]
    runs: int = Field(ge=0)
    passed: int = Field(ge=0)
    run_ids: list[str]
    failures: list[TestFailure]
    duration_ms: float = Field(ge=0)
    diff: Optional[str] = None  # requests_unchanged: the unified diff of the first request that differs


class TestSummaryRecord(_Record):
    """The last record of ``toolloop test``."""

    type: Literal["test_summary"]
    passed: int = Field(ge=0)
    failed: int = Field(ge=0)
    errors: int = Field(ge=0)
    duration_ms: float = Field(ge=0)


class NotificationRecord(_Record):
    """One attempt to tell someone about a run (``notify``): in the journal and ``runs show``,
    never among a run's own output; ``attempt`` 0 for an event never sent (the process stopped
    waiting for it)."""

    type: Literal["notification"]
    run_id: str
    event: Literal["approval_request", "paused", "failed", "finished"]
    attempt: int = Field(ge=0)
    ok: bool
    error: Optional[str]
    at: str = RFC3339


class RedactedAt(_Record):
    """A value of the export a redaction replaced: its 0-based line and the JSON Pointer in it."""

    record: int = Field(ge=1)
    pointer: str


class NotCaptured(_Record):
    """What a replay cannot reproduce from an export."""

    redacted: list[RedactedAt]
    child_runs: list[str]  # exported on their own
    env: list[str]  # names of the environment variables the run read for credentials


class ExportCounts(_Record):
    records: int = Field(ge=0)  # the run's records (the manifest and the model answers aside)
    model_answers: int = Field(ge=0)


class WentPast(_Record):
    """A model answer or receipt an earlier attempt of a resumed routed run journaled past the
    point where the run went another way: not the run's, kept as it was journaled; or (``start``)
    a call of that path that started and never got a receipt: ``{type, run_id, seq, started_at}``."""

    kind: Literal["model_answer", "receipt", "start"]
    ref: int  # the answer's n, or the call's seq
    at: str = RFC3339  # when it was set aside
    record: dict[str, Any]


class McpOffer(_Record):
    """What an MCP tool's server offered for it when the run was admitted (its values from
    toolloop's environment hidden): a recorded test case is admitted from it, with no server."""

    name: str
    description: Optional[str] = None
    input_schema: dict[str, Any]
    output_schema: Optional[dict[str, Any]] = None
    annotations: Optional[dict[str, Any]] = None  # the hints, by their protocol names (readOnlyHint, ...)


class ManifestRecord(_Record):
    """The first record of ``runs export``: what the file holds and what it cannot reproduce."""

    type: Literal["manifest"]
    run_id: str
    toolloop_version: str
    plan: str
    contract_sha256: Optional[str]
    counts: ExportCounts
    not_captured: NotCaptured
    went_past: Optional[list[WentPast]] = None  # only when the run went past any
    mcp_tools: Optional[dict[str, McpOffer]] = None  # "subagent/tool": only when the run (or a child run) has MCP tools


class OutputRecord(BaseModel):
    record: Union[ReceiptRecord, SummaryRecord, DecisionRecord, SupervisorRecord, GuardrailRecord,
                  ModelAnswerRecord, TestRecord, TestSummaryRecord,
                  NotificationRecord, ManifestRecord] = Field(discriminator="type")


def receipt_schema() -> dict:
    schema = OutputRecord.model_json_schema()
    inner = schema["properties"]["record"]
    out = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "toolloop output record",
        "description": "One line of `toolloop run --format jsonl` output.",
        "$defs": schema.get("$defs", {}),
    }
    out["oneOf"] = inner["oneOf"]
    out["discriminator"] = inner.get("discriminator")
    if out["discriminator"] is None:
        del out["discriminator"]
    return out


def registry_schema() -> dict:
    from .contract.models import RegistryDecl

    schema = RegistryDecl.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "toolloop registry"
    return schema


def plan_schema() -> dict:
    from .plan.models import PlanDecl

    schema = PlanDecl.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "toolloop plan"
    return schema


def suite_schema() -> dict:
    from .suite.models import SuiteDecl

    schema = SuiteDecl.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "toolloop suite"
    return schema


SCHEMAS = {"registry": registry_schema, "plan": plan_schema, "receipt": receipt_schema, "suite": suite_schema}
