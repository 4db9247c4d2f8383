"""The routed runner: a model picks the next tool from an allowlist, under hard budgets, until it
gives a final answer that is validated against the plan's schema.

The runner holds the loop's state and its budget ledger (``budget.py``), asks the router (``toolloop_cli.router``, pure) for
each turn's messages and parses its decision, executes admitted decisions through the same gates,
executors and settlement as every other call, and asks the final profile for the answer
(``final_answer.py``). It acts on its run through the handle the session gives it (``handle.py``).
Each turn:

1. budgets checked before the request (iterations, tokens, cost; the deadline bounds everything);
2. the router model answers (journaled as a ``model_answer``); tokens and cost are charged;
3. the decision is parsed; a rejected one (``unknown_tool``, ``malformed``, and what the gates'
   ``proposal_problem`` finds: ``invalid_args``, ``duplicate``, ``over_budget``) is not executed
   and becomes an observation;
4. a call passes the run-time gates (approval) and runs; its receipt carries the iteration;
5. the redacted result goes through the observation guardrails and becomes an observation;
6. supervisor rules and the judge look at the run; operators' steer and abort are read before
   every model request (and an abort while a call runs, which cancels it).

A resumed run replays its journal: recorded model answers are reused and settled receipts kept,
so the loop reaches the turn where it stopped with the budgets it had left.

However the loop ends, a call still running gets its receipt before the summary (``endings.py``),
and an ending other than ``final`` or ``paused`` says why in the summary's ``error``.
"""

from __future__ import annotations

import os
from typing import Any

import trio

from .._canonical import sha256_of
from .._request_delta import RequestChain
from ..plan.admit import AdmittedPlan
from ..router.closeout import route_of
from ..router.decisions import Decision, RouterPrompt, parse_decision
from ..router.observations import observe_rejection
from ..router.views import LoopView, Malformed, Observation, Step
from .endings import InFlight, LoopEnd, cut_short_receipt, error_of, quoted, timeout_why
from .final_answer import FinalAnswer
from .routed_calls import LoopCalls
from .gates import proposal_problem
from ..providers.base import CUT
from .model_calls import LoopTimeout, ModelCalls, ProviderFailed
from .recording import Recording
from .replay import credential_env
from .redact import RunSecrets, scrub_record, without_proposed_secrets
from .handle import RunHandle
from .session import RunnerEnd, RunSession
from .loopstate import LoopState
from .budget import BudgetLedger
from .supervision import Supervision
from .taint import OPTION as TAINT_OPTION, RunTaint, recorded_run_id
from .budget_pauses import BudgetPauses

#: replies in a row that hold no valid decision before the loop ends ``malformed_output``
MALFORMED_LIMIT = 3


_End = LoopEnd


class RoutedRunner(FinalAnswer, LoopCalls):
    """Runs an admitted routed plan, or resumes one from its journal (``recording``)."""

    def __init__(self, plan: AdmittedPlan, *, recording: Recording | None = None,
                 env: Any = None, parent_budget: BudgetLedger | None = None, contract_changed: bool = False,
                 parent_taint: RunTaint | None = None):
        assert plan.routed is not None
        self.plan = plan
        self.spec = plan.routed
        self.recording = recording
        self.contract_changed = contract_changed  # resumed with --accept-contract-change
        self.env = os.environ if env is None else env
        self.state = LoopState()
        # what the run has spent; a child run's spend counts toward its parent loop's ledger too
        self.ledger = BudgetLedger(self.spec.budget, parent=parent_budget,
                                   seconds_used=recording.seconds_used if recording else 0.0)
        self.observations: list[Observation] = []
        # whether the model was shown untrusted content: the gates read it (a child starts with its parent's)
        self.taint = RunTaint(self.spec.taint_on_write, parent=parent_taint)
        self._prompt = RouterPrompt(self.spec.prompts)  # each observation rendered once, then kept
        self._requests = RequestChain()  # the journal form of each request: a delta against the last
        self.steer: list[str] = []
        self.ran: set[tuple[str, str]] = set()  # (tool, args hash) of calls that went through the gate
        self.seq = 0
        self._malformed = 0
        self._last_rejected: tuple | None = None
        # the profiles' keys; joined to the run's secrets (scrubbed from every record) by ``begin``
        self._secrets = RunSecrets([self.env[p.api_key_env] for p in self.spec.profiles().values()
                                    if p.api_key_env and self.env.get(p.api_key_env)])
        #: (iteration, rule) of the supervisor pauses a resumed run already stopped at
        self.resumed_pauses: set[tuple[int, str]] = set(recording.pauses) if recording is not None else set()
        self.supervision = Supervision(self)
        self.budgets = BudgetPauses(self)  # budget.on_exceeded: pause, and the raises that answer it
        self._current: InFlight | None = None  # the call between its gate and its receipt
        self._started: set[int] = set()  # seqs of calls whose first attempt began
        self._scope: trio.CancelScope | None = None
        self._unsynced = False  # records handed to the journal since its last commit was awaited
        self._parsed: tuple[str, Decision | Malformed] | None = None  # the last reply parsed, and its decision
        self._hashed: tuple[Any, str] | None = None  # the last arguments hashed, and their hash

    # -- the journal -----------------------------------------------------------------------------

    def begin(self, session: RunSession) -> None:
        plan = self.plan
        session.ctx.services.secrets.add(self._secrets.values())
        self._secrets = session.ctx.services.secrets
        self._restore_taint(session)
        if self.recording is not None and not self.recording.replay:
            session.store.clear_records(session.run_id)  # printed again as the loop replays
            session.store.reopen_run(session.run_id)
            if self.contract_changed:
                session.store.set_contract(session.run_id, plan.contract.contract_sha256)
            return
        plan_path = plan.path if plan.path.startswith("<") else os.path.abspath(plan.path)
        options = {"subagent": plan.subagent.id, "app_root": plan.contract.app_root, **session.options.journal_form(),
                   "tool_hashes": {tid: t.contract_sha256 for tid, t in plan.subagent.tools.items()},
                   "credential_env": credential_env(plan)}
        if self.recording is not None and self.recording.fork is not None:  # a fork stays one on resume
            options.update(self.recording.fork.journal_form())
        if session.child_options is not None:  # a child run: how its parent's resume finds it again
            options.update(session.child_options)
            options["context"] = self._secrets.deep(options["context"])
        if self.taint.source is not None:  # inherited from the parent, or restored by a replay
            options["taint"] = self.taint.journal_form()
        session.store.create_run({
            "run_id": session.run_id, "mode": "routed", "plan_path": plan_path, "plan_sha256": plan.plan_sha256,
            "registry_path": os.path.abspath(plan.registry_path), "contract_sha256": plan.contract.contract_sha256,
            "options": options,
            "parallel_batch_id": None, "total_calls": 0, "lease_owner": session.owner,
        })

    def _restore_taint(self, session: RunSession) -> None:
        """The taint the journal holds: this run's own (``resume``), or the recorded run's (``replay``)."""
        rec = self.recording
        if rec is None:
            return
        run_id = recorded_run_id(rec.answers, rec.receipts) if rec.replay else session.run_id
        row = session.store.get_run(run_id) if run_id is not None else None
        # a new fork goes live from turn N: a taint the recording met there or later is not its own
        self.taint.restore(((row or {}).get("options") or {}).get(TAINT_OPTION),
                           before=rec.fork.iteration if rec.replay and rec.fork is not None else None)

    # -- the loop ----------------------------------------------------------------------------------

    async def __call__(self, run: RunHandle) -> RunnerEnd:
        self.handle = run
        run.ctx.services.budget = self.ledger  # child runs and dispatched calls check and charge it
        run.ctx.services.taint = self.taint  # the gates and receipts read it
        self.taint.run_id = run.run_id
        self.taint.journal(lambda form: run.set_option(TAINT_OPTION, form))
        rec = self.recording
        recorded: Any = rec.answers if rec is not None else ()
        if rec is not None and rec.replay:  # every profile answers from the recording: no network, no key
            from ..providers.replay import ReplayAnswers, ReplayProvider, answer_from_record

            answers = ReplayAnswers([answer_from_record(a) for a in rec.answers], "the recorded run")
            providers = {role: ReplayProvider(answers) for role in self.spec.profiles()}
            recorded = ()
            if rec.fork is not None:  # a fork: the recorded turns, then its plan's profiles live
                providers = self._forked(answers, run)
        else:
            providers = self.spec.make_providers(self.env, given=run.providers)
        self.models = ModelCalls(providers, run_id=run.run_id, journal=self._journal_answer, recorded=recorded,
                                 rng=run.ctx.services.rng, warn=run.warn, on_answer=run.on_model_answer,
                                 drop=self._went_past)
        self._note_starts(run)
        run.watch(self._handed)
        self.budgets.at_start()
        self.deadline = self.ledger.start()
        outcome, final, why = "timeout", None, None
        try:
            # a signal cancels the loop
            with trio.CancelScope(deadline=self.deadline) as scope, run.cancelled_by_signals(scope):
                self._scope = scope
                if run.interrupted:  # one came while the run started: no model is asked
                    scope.cancel()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self.supervision.watch_calls)  # one watch for aborts for every call
                    outcome, final, why = await self._loop()
                    nursery.cancel_scope.cancel()
            if run.interrupted:
                outcome, final = None, None  # a signal: the run is resumable, no outcome yet
            elif self.supervision.aborted is not None:  # an operator's abort while a call ran
                outcome, final, why = "aborted", None, self.supervision.aborted
            elif scope.cancelled_caught:  # the deadline, outside a model request
                why = timeout_why(self.spec.budget)
            if self._current is not None:  # the loop ended while a call ran: cancelled, it gets its receipt
                why = self._cut_short(outcome, why)
            if outcome == "timeout" and self.ledger.pauses and self.budgets.out(self.ledger.iterations, "timeout_s"):
                outcome, why = "paused", None
        finally:
            with trio.CancelScope(shield=True):
                given = list(run.providers.values())
                for p in providers.values():
                    if not any(p is g for g in given):  # an instance the caller gave stays the caller's
                        await p.aclose()
        if outcome is not None:  # ended on its own before recorded answers it went past (not a signal)
            self.models.went_past()
        if outcome not in (None, "paused"):
            self.supervision.late_controls(outcome)
        run.set_total_calls(self.seq)
        return self._end(outcome, final, why)

    def _went_past(self, from_n: int) -> None:
        """The run goes another way than its recorded answers from ``from_n`` on: they, and the
        calls the recording made from this turn's seq on, are not its own (``ModelCalls``). Nor
        are the supervisor pauses that path was resumed past from this turn on: a rule that fires
        there on the new path pauses the run again (a person let the old path go on, not this one)."""
        if self.recording is not None:
            self.recording.went_past(self.seq)
        turn = self.ledger.iterations  # the turn in progress, or the last one whose rules have run
        self.resumed_pauses = {p for p in self.resumed_pauses if p[0] < turn}
        self.handle.drop_went_past(from_n, self.seq)

    def _forked(self, answers: Any, run: RunHandle) -> dict[str, Any]:
        from ..providers.replay import ForkProvider

        live = self.spec.make_providers(self.env, given=run.providers)
        given = list(run.providers.values())
        return {role: ForkProvider(answers, p, close_live=not any(p is g for g in given)) for role, p in live.items()}

    def _note_starts(self, run: RunHandle) -> None:
        """Remember which calls began their first attempt: a write cut short after that may have
        happened (``interrupted``), one cut short before it did not (``cancelled``)."""
        services = run.ctx.services
        inner = services.before_start

        def before_start(info: tuple) -> None:
            self._started.add(info[0])
            if inner is not None:
                inner(info)

        services.before_start = before_start

    def _cut_short(self, outcome: str | None, why: str | None) -> str | None:
        """Settle the receipt of the call the loop's end cancelled; returns the run's ``why``."""
        call, self._current = self._current, None
        assert call is not None
        if outcome is None:  # a signal, or a child run whose parent's call was cancelled
            how = self.handle.state.stopped_by or "the run was interrupted by a signal"
        elif outcome == "aborted":
            how = "an operator aborted the run"
        else:
            how = timeout_why(self.spec.budget)
        receipt = cut_short_receipt(self.handle.ctx, call, started=call.seq in self._started, why=how)
        self.handle.settle(receipt)
        self._count(call.tool, call.args, receipt)
        if outcome == "timeout":
            return f"{how} while '{call.tool.id}' was running (its receipt is {receipt.status})"
        return why

    def _end(self, outcome: str | None, final: Any, why: str | None = None) -> RunnerEnd:
        status = {"final": "ok", "paused": "stopped", None: "interrupted"}.get(outcome, "failed")
        summary = {"outcome": outcome, "final": final, "route": route_of(outcome, final, self.spec.routes),
                   "loop": self.state.summary(self.models.count, self.ledger),
                   "error": error_of(outcome, self.scrubbed(why) if why else why), "tainted_by": self.taint.source,
                   "paused_by": self.budgets.paused_by(outcome), "overshoot": self.ledger.overshoot()}
        if self.contract_changed:
            summary["contract_changed"] = True
        if self.recording is not None and self.recording.fork is not None:
            summary["forked_from"] = self.recording.fork.summary()
        return RunnerEnd(stopped=outcome == "paused", status=status, summary=summary)

    async def _loop(self) -> tuple[str, Any, str | None]:
        try:
            while True:
                self._check_budgets(before_router=True)
                await self._turn()
        except _End as end:
            return end.outcome, end.final, end.why
        except LoopTimeout as exc:
            return "timeout", None, timeout_why(self.spec.budget, str(exc))
        except ProviderFailed as exc:
            message = self.scrubbed(str(exc))
            self.handle.ctx.emit_audit("provider_failed", error=message)
            return "provider_error", None, message

    def cancel_loop(self) -> None:
        """End the loop at once (an operator's abort read while a call runs)."""
        if self._scope is not None:
            self._scope.cancel()

    def scrubbed(self, text: str) -> str:
        return self._secrets.text(text)

    def record_supervisor(self, iteration: int, rule: str, action: str, reason: str) -> None:
        self.handle.record({
            "type": "supervisor", "run_id": self.handle.run_id, "iteration": iteration, "rule": rule,
            "action": action, "reason": reason})

    def _record_guard(self, iteration: int, guard: str, tool: str | None, action: str, reason: str | None) -> None:
        self.handle.record({
            "type": "guardrail", "run_id": self.handle.run_id, "iteration": iteration, "guard": guard,
            "tool": tool, "action": action, "reason": reason})

    def _check_budgets(self, *, before_router: bool) -> None:
        if self.ledger.pauses:
            self.budgets.check(before_router=before_router)
        if before_router and self.ledger.turns_used():
            raise _End("max_iterations", why=f"the router took its {self.spec.budget.max_iterations} turns"
                                             " (max_iterations) without a final answer")
        if self.ledger.spent():
            raise _End("budget_exceeded", why=self.ledger.exceeded_why())

    def _if_overspent(self) -> None:
        """A request that took the run past its tokens or dollars ends (or pauses) the loop."""
        if self.ledger.pauses:
            self.budgets.check_reply(self.ledger.iterations)
        if self.ledger.overspent():
            raise _End("budget_exceeded", why=self.ledger.exceeded_why())

    def _view(self) -> LoopView:
        spec = self.spec
        return LoopView(goal=spec.goal, context=spec.context, instructions=spec.instructions, tools=spec.tool_views,
                        observations=tuple(self.observations), budgets=self.ledger.left(), steer=tuple(self.steer),
                        outcomes=spec.outcomes)

    def _handed(self, _record: Any) -> None:
        self._unsynced = True

    async def committed(self) -> None:
        """Wait until the journal holds every record handed to it so far (the model's answers
        and decisions included), if any was handed since the last wait. Awaited before an effect
        those records describe: a call's gate (an approval's request) and its start. A model
        request never waits: it is no effect a record describes, and the journal commits in the
        order records were handed, so the answer it brings is never committed before a receipt
        (or any record) handed before it. Killed while the model answers, a resume finds the
        call's receipt, or none and no later answer: the call's start marker tells it then that
        the call began (a read runs again, a write is settled ``interrupted``)."""
        if self._unsynced:
            self._unsynced = False
            await self.handle.synced()

    async def ask(self, role: str, messages: list[dict]) -> Any:
        profile = self.spec.profiles()[role]
        ledger = self.ledger
        if ledger.pauses:
            self.budgets.check(before_router=False)
        if ledger.exhausted():  # a parent's budget spent by its children ends a child
            raise _End("budget_exceeded", why=ledger.exceeded_why())
        left = ledger.tokens_left()
        cap = min(profile.max_output_tokens, left) if profile.max_output_tokens else left
        turn = ledger.iterations + 1 if role == "router" else ledger.iterations
        answer = await self.models.ask(role, profile, messages, deadline=self.deadline, max_tokens=cap, turn=turn,
                                       cost_budget=ledger.cost_left() is not None)
        r = answer.reply
        cost = profile.price.cost(r.input_tokens, r.output_tokens) if profile.price is not None else None
        ledger.charge_request(role, r.input_tokens, r.output_tokens, cost)
        return answer

    async def _turn(self) -> None:
        turn = self.ledger.iterations + 1
        why = self.supervision.read_controls(turn, live=not self.models.will_reuse("router"))
        if why is not None:
            raise _End("aborted", why=why)
        view = self._view()
        self.steer = []
        answer = await self.ask("router", self._prompt.messages(view))
        it = self.ledger.count_turn()
        await self._decide(it, answer)
        ended = await self.supervision.after_turn(it)
        if ended is not None:
            raise _End(ended[0], why=ended[1])

    def _sha(self, args: Any) -> str:
        """The hash of a decision's arguments, taken once a turn (the proposal, the duplicate
        check and the call's count all ask for it)."""
        if self._hashed is None or self._hashed[0] is not args:
            self._hashed = (args, sha256_of(args))
        return self._hashed[1]

    def _decision_of(self, text: str) -> Decision | Malformed:
        """The decision a router's reply holds, parsed once for the journal and the turn."""
        if self._parsed is None or self._parsed[0] is not text:
            self._parsed = (text, parse_decision(text))
        return self._parsed[1]

    async def _decide(self, it: int, answer: Any) -> None:
        decision = self._decision_of(answer.reply.text)
        if isinstance(decision, Malformed) and answer.reply.cut:
            decision = Malformed(f"the reply was {CUT}; {decision.why}")
        if isinstance(decision, Decision) and decision.action == "call":
            self.supervision.proposed(decision.tool, self._sha(decision.args) if decision.args is not None else None)
        if self.ledger.pauses:  # the reply is kept: its decision is recorded when it is acted on
            self.budgets.check_reply(it)
        if self.ledger.overspent():
            self._record_decision(it, decision, answer, rejected=None)
            raise _End("budget_exceeded", why=self.ledger.exceeded_why())
        if isinstance(decision, Malformed):
            self.supervision.step(Step(it, "malformed", reason=decision.why))
            self._reject(it, decision, answer, None, "malformed", decision.why)
            self._malformed += 1
            if self._malformed >= MALFORMED_LIMIT:
                raise _End("malformed_output", why=f"the router model's reply held no valid decision {MALFORMED_LIMIT}"
                                                   f" times in a row; the last: {quoted(decision.why)}")
            return
        self._malformed = 0
        if decision.action == "abort":
            self._record_decision(it, decision, answer, rejected=None)
            raise _End("aborted", why=f"the router model gave up: {quoted(decision.reason)}")
        if decision.action == "final":
            self._record_decision(it, decision, answer, rejected=None)
            raise _End("final", await self._closeout())
        await self._call(it, decision, answer)

    # -- decisions ---------------------------------------------------------------------------------

    def _tool(self, name: str | None) -> Any:
        if name is None or name not in self.spec.tools:
            return None
        return self.plan.subagent.tools[name]

    def _rejection(self, decision: Decision, *, withheld: bool = False) -> tuple[str, str] | None:
        """Why a proposed call is not executed, or None. ``withheld``: the markers standing for
        redacted values the journal withheld are not checked against the input schema."""
        tool = self._tool(decision.tool)
        if tool is None:
            return "unknown_tool", (f"'{decision.tool}' is not one of the tools you may call: "
                                    f"{', '.join(self.spec.tools)}")
        return proposal_problem(self.handle.ctx, tool, decision.args, withheld=withheld,
                                ran_before=(tool.id, self._sha(decision.args)) in self.ran)

    def _reject(self, it: int, decision: Decision | Malformed, answer: Any, tool: str | None, kind: str,
                why: str) -> None:
        self.state.rejections[kind] = self.state.rejections.get(kind, 0) + 1
        shown_args = self._shown_args(decision)
        self._record_decision(it, decision, answer, rejected=kind)
        observation = observe_rejection(it, tool, kind, why, args=shown_args)
        self.observations.append(observation)
        if isinstance(decision, Decision):
            self.supervision.step(Step(it, decision.action, tool, shown_args, decision.reason, observation))
        key = (kind, tool, self._sha(decision.args) if isinstance(decision, Decision) else None,
               decision.action if isinstance(decision, Decision) else None)
        if key == self._last_rejected and kind != "malformed":
            raise _End("duplicate_action", why=f"the router model proposed the same rejected action twice in a row"
                                                f" ({kind}: {quoted(why)})")
        self._last_rejected = key

    async def _call(self, it: int, decision: Decision, answer: Any) -> None:
        withheld = self._withheld(decision, answer, it)
        rejected = self._rejection(decision, withheld=withheld)
        if rejected is not None and rejected[0] == "over_budget" and self.ledger.tool_calls_pause():
            self.budgets.check_tool_call(it)  # pauses, or a raise answered it: checked again
            rejected = self._rejection(decision, withheld=withheld)
        if rejected is not None:
            self._reject(it, decision, answer, decision.tool, *rejected)
            return
        self._last_rejected = None
        self._record_decision(it, decision, answer, rejected=None)
        tool = self._tool(decision.tool)
        args = decision.args or {}
        receipt = await self._receipt(it, tool, args, withheld=withheld)
        observation = await self._observe(it, tool.id, receipt)
        self.taint.shown(it, tool, receipt)  # a guardrail's mask or block does not untaint
        self.observations.append(observation)
        self.supervision.step(Step(it, "call", tool.id, receipt.args, decision.reason, observation))

    def _shown_args(self, decision: Decision | Malformed) -> Any:
        if not isinstance(decision, Decision) or decision.args is None:
            return None
        tool = self._tool(decision.tool)
        return self.handle.ctx.redactor(tool).apply(decision.args) if tool is not None else decision.args

    def _record_decision(self, it: int, decision: Decision | Malformed, answer: Any, *, rejected: str | None) -> None:
        is_decision = isinstance(decision, Decision)
        rec = {
            "type": "decision", "run_id": self.handle.run_id, "iteration": it,
            "action": decision.action if is_decision else None,
            "tool": decision.tool if is_decision else None,
            "args": self._shown_args(decision),
            "reason": decision.reason if is_decision else decision.why,
            "rejected": rejected,
            "tokens": {"input": answer.reply.input_tokens, "output": answer.reply.output_tokens},
            "model": answer.reply.model, "duration_ms": answer.duration_ms,
        }
        self.handle.record(rec)

    async def _journal_answer(self, rec: dict) -> None:
        """Journal a model's answer with no secret in it: the values it proposes for a tool's
        redacted fields are replaced where they stand (and scrubbed from everything the run
        writes after, since the model may repeat them), the run's credentials wherever they occur.
        A resumed run that meets such an answer cannot rebuild the call (``_withheld``)."""
        if rec.get("role") == "router":
            rec = {**rec, "text": without_proposed_secrets(rec["text"], self._tool, self.handle.ctx.redactor, self._secrets,
                                                           self._decision_of(rec["text"]))}
        # the request as what it adds to the one before (``_request_delta.py``): O(n) text a run;
        # the chain scrubs it, searching only the text that may hold a secret it did not search
        rest = scrub_record({k: v for k, v in rec.items() if k != "request"}, self._secrets)
        rec = {k: rec[k] if k == "request" else rest[k] for k in rec}
        self.handle.model_answer(self._requests.journal_form(rec, self._secrets.scrubber if self._secrets else None))
        self._unsynced = True

    def _withheld(self, decision: Decision, answer: Any, it: int) -> bool:
        """A recorded answer whose call held a redacted value the journal withheld: the call
        cannot be rebuilt (its arguments came from the model)."""
        rec = self.recording
        recorded = answer.recorded or (rec is not None and rec.replay and not rec.live(it))
        tool = self._tool(decision.tool)
        return recorded and tool is not None and self.handle.ctx.redactor(tool).marked(decision.args)

