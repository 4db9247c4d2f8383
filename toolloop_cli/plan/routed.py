"""Admission of routed plans: every field checked, every file the plan names read now, and the
result frozen into a ``RoutedSpec`` the engine's routed runner works from (the loop itself lives
in the engine). A missing or empty file fails closed before any model is asked anything."""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import Any, Callable, Mapping

from .._paths import look_at
from .._text import clip, listing, quoted
from ..contract.compiled import Contract, SubagentSpec
from ..contract.problems import Collector, Problem, did_you_mean
from ..providers import PROVIDERS, Price, Profile, check_profile
from ..router.closeout import ENGINE_OUTCOMES
from ..router.prompts import PromptError, Prompts, read_app_file, read_packaged
from ..router.supervisor import RULES, Rule
from ..router.views import ToolView
from .models import PlanDecl, ProfileDecl, RuleDecl

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
@dataclass(frozen=True, slots=True)
class Budget:
    max_iterations: int
    max_tokens: int
    #: the plan's max_tool_calls, capped by the subagent's runner_defaults.max_calls
    max_tool_calls: int
    timeout_s: float
    max_cost_usd: float | None = None
    #: end (the run ends with the budget's outcome) or pause (outcome paused, resumable with --raise)
    on_exceeded: str = "end"
    #: the subagent's runner_defaults.max_calls, which a raised max_tool_calls never passes
    max_calls_cap: int | None = None


@dataclass(frozen=True, slots=True)
class Guard:
    """A guardrail callable: ``ref`` as the plan names it, ``fn`` resolved."""

    ref: str
    fn: Callable[..., Any]


@dataclass(frozen=True, slots=True)
class JudgeSpec:
    profile: Profile
    prompt_path: str
    prompt: str  # the App's judge prompt, read at admission


@dataclass(frozen=True, slots=True)
class SupervisorSpec:
    rules: tuple[Rule, ...]
    judge: JudgeSpec | None
    every_n_iterations: int
    on_violation: str | None  # abort | pause | steer; set whenever rules or a judge are given
    on_judge_error: str  # ignore | pause | abort
    steer_message: str | None


@dataclass(frozen=True)
class RoutedSpec:
    """Everything the routed runner needs, checked and read at admission."""

    goal: str
    context: dict
    instructions: str | None
    tools: tuple[str, ...]
    tool_views: tuple[ToolView, ...]
    router_profile: Profile
    final_profile: Profile
    budget: Budget
    final_schema: Any
    final_validator: Any  # compiled, or None when the plan has no final_schema
    outcomes: tuple[str, ...] | None
    routes: Mapping[str, str]
    supervisor: SupervisorSpec | None
    observation_guards: tuple[Guard, ...]
    final_guards: tuple[Guard, ...]
    prompts: Prompts
    inputs: Any = None
    inputs_validator: Any = None
    plan_dir: str = "."
    #: recorded answers of every replay fixture the profiles name, by resolved path
    fixtures: Mapping[str, tuple] = field(default_factory=dict)
    #: what a write or destructive call proposed after untrusted content gets: approve | deny | allow
    taint_on_write: str = "approve"

    def profiles(self) -> dict[str, Profile]:
        """The profiles by role: router, final, and judge when there is one."""
        out = {"router": self.router_profile, "final": self.final_profile}
        if self.supervisor is not None and self.supervisor.judge is not None:
            out["judge"] = self.supervisor.judge.profile
        return out

    def make_providers(self, env: Mapping[str, str], replay_answers: Any = None,
                       given: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """A provider per role: an instance ``given`` under the profile's provider name, else one
        made for it. Replay profiles answer from the fixtures read at admission, one shared
        cursor per fixture; ``replay_answers`` (a ``ReplayAnswers``) overrides them all."""
        from ..providers import make_provider
        from ..providers.replay import ReplayAnswers

        shared = {path: ReplayAnswers(answers, display(path)) for path, answers in self.fixtures.items()}
        out = {}
        for role, profile in self.profiles().items():
            answers = replay_answers
            if answers is None and profile.provider == "replay" and profile.fixture is not None:
                answers = shared[profile.fixture]
            out[role] = make_provider(profile, env=env, plan_dir=self.plan_dir, replay_answers=answers, given=given)
        return out


def display(path: str) -> str:
    from ..contract.registry import display_path

    return display_path(path)


class _Checker:
    def __init__(self, decl: PlanDecl, contract: Contract, sub: SubagentSpec, col: Collector, plan_dir: str):
        self.decl = decl
        self.contract = contract
        self.sub = sub
        self.col = col
        self.plan_dir = plan_dir
        self.extra: list[Problem] = []
        self.fixtures: dict[str, tuple] = {}

    def add(self, code: str, message: str, path: tuple = (), hint: str = "", at_key: bool = False) -> None:
        self.col.add(code, message, path, hint, at_key=at_key)

    def resolve(self, relative: str) -> str:
        return str(FsPath(self.plan_dir) / relative)

    # -- profiles ---------------------------------------------------------------------------

    def profile(self, prof: ProfileDecl | None, at: tuple) -> Profile | None:
        if prof is None:
            return None
        if prof.provider not in PROVIDERS:
            self.add("TL410", f"unknown provider {quoted(prof.provider)}", at + ("provider",),
                     f"use one of: {', '.join(PROVIDERS)}")
            return None
        ok = True
        if prof.api_key_env is not None and not _ENV_NAME.fullmatch(prof.api_key_env):
            # never quote the value: it may be a key pasted in by mistake
            self.add("TL410", "api_key_env must name an environment variable (letters, digits, '_'), not hold a key",
                     at + ("api_key_env",), "write e.g. api_key_env: OPENAI_API_KEY and export the key in that variable")
            ok = False
        price = Price(prof.price.input_per_mtok, prof.price.output_per_mtok) if prof.price is not None else None
        profile = check_profile(Profile(prof.provider, prof.model, prof.base_url, prof.api_key_env, prof.temperature,
                                        prof.max_output_tokens, price, prof.fixture), at, self)
        return profile if ok else None

    def fixture(self, path: str, given: str, at: tuple) -> bool:
        from ..providers.replay import FixtureError, read_fixture

        if path in self.fixtures:
            return True
        if (looked := look_at(path)).kind in ("bad", "other"):  # no name, or a device or pipe: never read
            self.add("TL416", f"fixture file cannot be read, {looked.why}: {quoted(given)}", at,
                     "the path is relative to the plan's folder; export one with 'toolloop runs export RUN_ID'")
            return False
        try:
            self.fixtures[path] = read_fixture(path)
        except FixtureError as exc:
            if exc.line == 0:
                self.add("TL416", f"{exc.message}: {quoted(given)}", at,
                         "the path is relative to the plan's folder; export one with 'toolloop runs export RUN_ID'")
            else:
                self.extra.append(Problem("TL421", exc.message, display(path), exc.line, 1, "",
                                          "a fixture is the JSON Lines output of 'toolloop runs export RUN_ID'"))
            return False
        return True

    # -- files ------------------------------------------------------------------------------

    def app_file(self, given: str, what: str, at: tuple) -> str | None:
        if (looked := look_at(self.resolve(given))).kind in ("bad", "other"):  # a device or pipe: never read
            self.add("TL416", f"{what} file cannot be read, {looked.why}: {quoted(given)}", at,
                     "the path is relative to the plan's folder; a file the plan names must exist and not be empty")
            return None
        try:
            return read_app_file(self.resolve(given), what)
        except PromptError as exc:
            self.add("TL416", f"{exc.why}: {quoted(given)}", at,
                     "the path is relative to the plan's folder; a file the plan names must exist and not be empty")
            return None

    def packaged(self, name: str) -> Any:
        try:
            return read_packaged(name)
        except PromptError as exc:
            if exc.why in ("the file is empty", "missing from the installed package"):
                message = f"prompt file {quoted(name)} is missing or empty in the installed package"
            else:
                message = f"prompt file {quoted(name)} is broken: {exc.why}"
            self.add("TL415", message, (), "reinstall toolloop; prompts are package data")
            return None

    # -- schemas ----------------------------------------------------------------------------

    def schema(self, schema: Any, key: str) -> Any:
        """The compiled validator of a plan schema, or None after reporting its problems."""
        from ..contract import schemas

        if schema is None:
            return None
        bad = False
        for spath, message, hint in schemas.meta_errors(schema):
            self.add("TL320", f"{key} is not a valid JSON Schema: {message}", (key,) + spath, hint)
            bad = True
        for spath, code, message in schemas.check_refs(schema):
            self.add(code, message, (key,) + spath, "use a local reference such as '#/$defs/name'")
            bad = True
        if bad:
            return None
        try:
            return schemas.compile_validator(schema, mask=False)
        except Exception as exc:  # noqa: BLE001 - the validator library's own errors
            self.add("TL320", f"{key} does not compile: {clip((str(exc).splitlines() or [type(exc).__name__])[0])}", (key,), "fix the schema")
            return None

    def context(self, validator: Any) -> dict:
        from ..contract.schemas import schema_errors

        context = self.decl.context if self.decl.context is not None else {}
        if validator is not None and not validator.is_valid(context):
            for msg in schema_errors(validator, context, limit=5):
                self.add("TL417", f"context fails the plan's inputs schema: {msg}",
                         ("context",) if self.decl.context is not None else ("inputs",),
                         "pass a context that matches 'inputs'", at_key=self.decl.context is None)
        return context

    # -- outcomes and routes ----------------------------------------------------------------

    def outcomes(self) -> tuple[str, ...] | None:
        declared = self.decl.outcomes
        if declared is None:
            return None
        seen: set[str] = set()
        for i, name in enumerate(declared):
            if name in ENGINE_OUTCOMES:
                self.add("TL418", f"outcome {quoted(name)} is one of the loop's own outcomes", ("outcomes", i),
                         f"choose another name; the loop's own are: {', '.join(ENGINE_OUTCOMES)}")
            elif name in seen:
                self.add("TL418", f"outcome {quoted(name)} is declared twice", ("outcomes", i), "declare each outcome once")
            elif not name.strip():
                self.add("TL418", "an outcome name is empty", ("outcomes", i), "name the outcome")
            seen.add(name)
        schema = self.decl.final_schema
        if schema is not None and not _can_hold_outcome(schema, declared):
            self.add("TL418", "final_schema cannot hold an 'outcome' key with one of the declared outcomes",
                     ("final_schema",), "allow a string property 'outcome' (its values are checked against 'outcomes')",
                     at_key=True)
        return tuple(declared)

    def routes(self, outcomes: tuple[str, ...] | None) -> dict[str, str]:
        routes = self.decl.routes or {}
        known = tuple(outcomes or ()) + ENGINE_OUTCOMES
        for key in routes:
            if key not in known:
                near = did_you_mean(key, known)
                self.add("TL419", f"route {quoted(key)} is neither a declared outcome nor one of the loop's outcomes",
                         ("routes", key), f"did you mean {quoted(near)}?" if near else
                         f"route one of: {', '.join(known)}", at_key=True)
        return dict(routes)

    # -- supervisor and guardrails ----------------------------------------------------------

    def rule(self, i: int, r: RuleDecl, action: str | None) -> Rule | None:
        kind = RULES[r.when]
        required, optional = kind.required, kind.optional
        at = ("supervisor", "rules", i)
        ok = True
        for name in required:
            if getattr(r, name) is None:
                self.add("TL420", f"rule {quoted(r.when)} needs {quoted(name)}", at, f"add {name}: ...", at_key=True)
                ok = False
        for name in ("count", "tool", "gt", "gte", "effect"):
            if name not in required + optional and getattr(r, name) is not None:
                self.add("TL420", f"rule {quoted(r.when)} takes no {quoted(name)}", at + (name,),
                         f"{quoted(r.when)} takes: {', '.join(required + optional)}", at_key=True)
                ok = False
        rule = Rule(i, r.when, action or "abort", r.count, r.tool, r.gt, r.gte, r.effect,  # type: ignore[arg-type]
                    (r.steer_message or "").strip() or None)
        problem = kind.check(rule)
        if problem is not None:
            self.add("TL420", problem[1], at + (problem[0],), problem[2])
            ok = False
        if r.tool is not None and r.tool not in self.sub.tools:
            near = did_you_mean(r.tool, self.sub.tools)
            self.add("TL402", f"unknown tool {quoted(r.tool)} in subagent {quoted(self.sub.id)}", at + ("tool",),
                     f"did you mean {quoted(near)}?" if near else f"known tools: {listing(sorted(self.sub.tools))}")
            ok = False
        if not ok or action is None:
            return None
        return dataclasses.replace(rule, action=action)

    def supervisor(self) -> tuple[SupervisorSpec | None, bool]:
        sv = self.decl.supervisor
        if sv is None:
            return None, True
        at = ("supervisor",)
        ok = True
        if (sv.rules or sv.judge is not None) and sv.on_violation is None:
            self.add("TL420", "the supervisor needs 'on_violation' when it has rules or a judge", at,
                     "add on_violation: abort | pause | steer", at_key=True)
            ok = False
        if sv.on_violation == "steer" and not _steer_said(sv):
            self.add("TL420", "on_violation: steer needs a steer_message", at + ("on_violation",),
                     "add steer_message: the message the router is given", at_key=True)
            ok = False
        rules = [self.rule(i, r, sv.on_violation) for i, r in enumerate(sv.rules)]
        judge = None
        if sv.judge is not None:
            jat = at + ("judge",)
            profile = self.profile(sv.judge.profile, jat + ("profile",))
            prompt = self.app_file(sv.judge.prompt, "judge prompt", jat + ("prompt",))
            ok = ok and profile is not None and prompt is not None
            if profile is not None and prompt is not None:
                judge = JudgeSpec(profile, self.resolve(sv.judge.prompt), prompt)
        if not ok or any(r is None for r in rules):
            return None, False
        return SupervisorSpec(tuple(r for r in rules if r is not None), judge, sv.every_n_iterations,
                              sv.on_violation, sv.on_judge_error, sv.steer_message), True

    def guards(self, kind: str) -> tuple[Guard, ...]:
        from ..contract.callables import resolve

        refs = getattr(self.decl.guardrails, kind) if self.decl.guardrails is not None else []
        out = []
        for i, ref in enumerate(refs):
            got = resolve(ref, self.contract.app_root)
            if got.fn is None:
                self.add(got.code or "TL306", f"guardrail: {got.message}", ("guardrails", kind, i), got.hint)
            else:
                out.append(Guard(ref, got.fn))
        return tuple(out)


def _can_hold_outcome(schema: Any, outcomes: list[str]) -> bool:
    """Could an answer valid under ``schema`` carry ``outcome`` set to a declared outcome?
    Open or undecidable schemas say yes; only a clear "no" refuses the plan."""
    from ..contract.schemas import compile_validator, pointer_can_match

    if schema is False:
        return False
    if schema is True or not isinstance(schema, dict):
        return True
    types = schema.get("type")
    if types is not None and "object" not in (types if isinstance(types, list) else [types]):
        return False
    if not pointer_can_match(schema, "/outcome"):
        return False
    prop = (schema.get("properties") or {}).get("outcome") if isinstance(schema.get("properties"), dict) else None
    if prop is None or prop is True:
        return True
    if prop is False:
        return False
    try:
        validator = compile_validator({**prop, "$defs": schema.get("$defs", {})} if isinstance(prop, dict) else prop,
                                      mask=False)
    except Exception:  # noqa: BLE001 - a $ref this cannot follow alone: do not refuse on a guess
        return True
    return any(validator.is_valid(o) for o in outcomes)


def admit_routed(decl: PlanDecl, contract: Contract, sub: SubagentSpec, col: Collector,
                 plan_dir: str | os.PathLike | None = None, child: bool = False) -> tuple[RoutedSpec | None, list[Problem]]:
    """Check a routed plan; returns its spec (``None`` when anything is wrong) and problems
    found in other files (fixture lines), which ``col`` cannot place."""
    ck = _Checker(decl, contract, sub, col, os.fspath(plan_dir) if plan_dir is not None else ".")
    _check_required(ck, decl)
    profiles = _profiles(ck, decl)
    final_validator = ck.schema(decl.final_schema, "final_schema")
    inputs_validator = ck.schema(decl.inputs, "inputs")
    # a child plan's context comes from its parent's call, checked against inputs by the call's gate
    context = ck.context(inputs_validator) if not child else {}
    _check_allowlist(ck, decl, sub)
    outcomes = ck.outcomes()
    routes = ck.routes(outcomes)
    supervisor, _ = ck.supervisor()
    _check_prices(ck, decl)
    observation_guards, final_guards = ck.guards("observations"), ck.guards("final")
    instructions = ck.app_file(decl.instructions, "instructions", ("instructions",)) if decl.instructions else None
    files = [ck.packaged(name) for name in ("router.md", "final.md", "repair.md")]
    judge_prompt = ck.packaged("judge.md") if decl.supervisor is not None and decl.supervisor.judge is not None else None
    if col.has_errors or ck.extra:
        return None, ck.extra
    assert decl.budget is not None and decl.goal is not None
    router_profile, final_profile = profiles["router_profile"], profiles["final_profile"]
    assert router_profile is not None and final_profile is not None
    allowed = tuple(decl.allowed_tools) if decl.allowed_tools is not None else tuple(sub.allowed_tools)
    views = tuple(ToolView(t, sub.tools[t].description, sub.tools[t].input_schema, sub.tools[t].effect) for t in allowed)
    b = decl.budget
    max_tool_calls = b.max_tool_calls if sub.max_calls is None else min(b.max_tool_calls, sub.max_calls)
    spec = RoutedSpec(
        goal=decl.goal, context=context, instructions=instructions, tools=allowed, tool_views=views,
        router_profile=router_profile, final_profile=final_profile,
        budget=Budget(b.max_iterations, b.max_tokens, max_tool_calls, b.timeout_s, b.max_cost_usd, b.on_exceeded,
                      sub.max_calls),
        final_schema=decl.final_schema, final_validator=final_validator, outcomes=outcomes, routes=routes,
        supervisor=supervisor, observation_guards=observation_guards, final_guards=final_guards,
        prompts=Prompts(files[0], files[1], files[2], judge_prompt), inputs=decl.inputs,
        inputs_validator=inputs_validator, plan_dir=ck.plan_dir, fixtures=dict(ck.fixtures),
        taint_on_write=_check_taint(ck, decl, sub, allowed),
    )
    return spec, []


def _check_taint(ck: _Checker, decl: PlanDecl, sub: SubagentSpec, allowed: tuple[str, ...]) -> str:
    """The plan's ``taint.on_write``; TL430 (a warning) when it is ``allow`` while the allowed
    tools hold both an untrusted tool and a write or destructive one: nothing then stands between
    content written by someone outside and a write the model makes of it."""
    on_write = decl.taint.on_write if decl.taint is not None else "approve"
    if on_write != "allow":
        return on_write
    untrusted = [t for t in allowed if sub.tools[t].output_trust == "untrusted"]
    writes = [t for t in allowed if sub.tools[t].effect in ("write", "destructive")]
    if untrusted and writes:
        ck.col.add("TL430", f"taint.on_write: allow lets the model write with {quoted(writes[0])} after reading"
                            f" untrusted content from {quoted(untrusted[0])}", ("taint", "on_write"),
                   "use on_write: approve (a person answers each such write) or deny, or drop one of the two"
                   " from allowed_tools", level="warning")
    return on_write


def _steer_said(sv: Any) -> bool:
    """Whether every steer has its message: the supervisor's, or each rule's own when there is no
    judge (which has only the supervisor's)."""
    if (sv.steer_message or "").strip():
        return True
    return sv.judge is None and bool(sv.rules) and all((r.steer_message or "").strip() for r in sv.rules)


def _check_required(ck: _Checker, decl: PlanDecl) -> None:
    """TL202 and TL410: a routed plan's goal and budget."""
    if not decl.goal:
        ck.add("TL202", "a routed plan needs a 'goal'", (), "add 'goal: ...'", at_key=True)
    if decl.budget is None:
        ck.add("TL410", "a routed plan needs a 'budget' with max_iterations, max_tokens, max_tool_calls and timeout_s",
               (), "add 'budget: {max_iterations: 8, max_tokens: 40000, max_tool_calls: 12, timeout_s: 120}'", at_key=True)


def _profiles(ck: _Checker, decl: PlanDecl) -> dict[str, Profile | None]:
    """The router's and the final answer's profiles, each checked (None where it is wrong)."""
    profiles: dict[str, Profile | None] = {}
    for key in ("router_profile", "final_profile"):
        prof = getattr(decl, key)
        if prof is None:
            ck.add("TL410", f"a routed plan needs {quoted(key)} (provider and model are never defaulted)", (),
                   f"add '{key}: {{provider: ..., model: ...}}'", at_key=True)
        profiles[key] = ck.profile(prof, (key,))
    return profiles


def _check_allowlist(ck: _Checker, decl: PlanDecl, sub: SubagentSpec) -> None:
    """TL402 and TL411: the plan's allowed_tools are tools of the subagent, and allowed there."""
    for i, name in enumerate(decl.allowed_tools or []):
        if name not in sub.tools:
            near = did_you_mean(name, sub.tools)
            ck.add("TL402", f"unknown tool {quoted(name)} in subagent {quoted(sub.id)}", ("allowed_tools", i),
                   f"did you mean {quoted(near)}?" if near else f"known tools: {listing(sorted(sub.tools))}")
        elif name not in sub.allowed_tools:
            ck.add("TL411", f"{quoted(name)} is not in the subagent's runner_defaults.allowed_tools", ("allowed_tools", i),
                   "routed allowlists are a subset of the subagent's")


def _check_prices(ck: _Checker, decl: PlanDecl) -> None:
    """TL410: a cost budget needs a price on every profile the plan uses."""
    if decl.budget is None or decl.budget.max_cost_usd is None:
        return
    used = [("router_profile",), ("final_profile",)]
    if decl.supervisor is not None and decl.supervisor.judge is not None:
        used.append(("supervisor", "judge", "profile"))
    for at in used:
        prof = decl.router_profile if at == ("router_profile",) else decl.final_profile if at == ("final_profile",) \
            else decl.supervisor.judge.profile  # type: ignore[union-attr]
        if prof is not None and prof.price is None:
            ck.add("TL410", f"budget.max_cost_usd needs a price on every profile the plan uses; {'.'.join(at)} has none",
                   at, "add price: {input_per_mtok: ..., output_per_mtok: ...} (US dollars per million tokens)",
                   at_key=True)
