"""People and rules in charge of a routed run: supervisor rules and the judge after each turn, and
operators' steer and abort read from the journal before each model request and, for an abort,
while a call runs.

Every rule hit, verdict, judge error and operator action is a ``supervisor`` record. What it does:
``abort`` ends the loop (outcome ``aborted``), ``pause`` ends it resumable (outcome ``paused``),
``steer`` adds a message to the next turn, ``continue`` (a judge's verdict) does nothing. A
control that arrives after the run's last model request is recorded as having come too late.

An ending is ``(outcome, why)``: ``why`` is the summary's ``error.message`` for a person.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from ..router.judge import judge_messages, parse_verdict
from ..router.convergence import Convergence
from ..router.supervisor import SupervisorState, check_rules
from ..router.views import Malformed, Step, Trajectory
from ..providers.base import CUT
from .endings import quoted
from .model_calls import ProviderFailed
from .raises import KIND as RAISE

if TYPE_CHECKING:
    from .routed import RoutedRunner

#: how often a running call looks for an operator's abort in the journal
CONTROL_POLL_S = 0.2

Ending = tuple[str, str]


class Supervision:
    """The supervisor of one routed run (rules, judge) and the operator controls it reads."""

    def __init__(self, runner: RoutedRunner):
        self.runner = runner
        self.spec = runner.spec.supervisor
        self.fired: dict[int, int] = {}  # rule index -> iteration it last fired
        self.proposals: dict[tuple[str, str], int] = {}
        self.effects_run: dict[str, int] = {}
        self.convergence = Convergence()
        self.steps: list[Step] = []
        self.controls_seen = 0
        self.aborted: str | None = None  # why, when an operator's abort ended the loop while a call ran
        self.looked_at = float("-inf")  # when the journal was last looked at for an abort (the run's clock)
        # the call the watch for aborts looks out for (its turn), None between calls; when the watch
        # looks next; and the cancel scope it sleeps in, whose deadline the runner moves
        self._watched: int | None = None
        self._due = float("inf")
        self._sleep: trio.CancelScope | None = None

    # -- what the runner tells it ------------------------------------------------------------

    def proposed(self, tool: str | None, args_sha: str | None) -> None:
        if tool is not None and args_sha is not None:
            self.proposals[(tool, args_sha)] = self.proposals.get((tool, args_sha), 0) + 1
            self.convergence.proposed(tool, args_sha)

    def settled(self, tool: str, receipt: Any) -> None:
        """A call of the loop got its receipt (or a resume kept it): what the convergence rules see."""
        self.convergence.settled(tool, receipt.status, receipt.result, receipt.error)

    def ran(self, effect: str) -> None:
        self.effects_run[effect] = self.effects_run.get(effect, 0) + 1

    def step(self, step: Step) -> None:
        self.steps.append(step)

    # -- operators ---------------------------------------------------------------------------

    def read_controls(self, turn: int, *, live: bool, iteration: int | None = None, shown: bool = True) -> str | None:
        """Steer and abort written by ``toolloop steer`` / ``abort`` since the last read: a steer goes
        to turn ``turn``; returns why the run is aborted, or None.

        ``turn`` is also where a resumed run applies again a control its journal says it read. A
        control not read yet is left while a resumed run still replays recorded answers (``live``
        False): it arrived while the run was paused, and the first turn a model really answers is
        the one that must see it. ``iteration`` is the turn the record is written at (default
        ``turn``); ``shown`` False where no turn follows to show a steer at (closeout)."""
        runner = self.runner
        run = runner.handle
        at = turn if iteration is None else iteration
        for n, kind, message, consumed_at in run.controls_after(self.controls_seen):
            if kind == RAISE:  # a budget's raise is read where the budget ran out (budget_pauses.py)
                continue
            if consumed_at is not None and consumed_at > turn:
                break  # read at a later turn of the run this resume replays
            if consumed_at is None and not live:
                break
            self.controls_seen = n + 1
            if not run.control_holds(n, kind):
                continue
            if consumed_at is None:
                run.consume_control(n, turn)
            if kind == "steer" and shown:
                runner.steer.append(message)
                runner.record_supervisor(at, "operator", "steer", message)
            elif kind == "steer":
                runner.record_supervisor(at, "operator", "steer", f"{message} (arrived after the router's last turn:"
                                                                 " not shown to the model)")
            else:
                runner.record_supervisor(at, "operator", "abort", message or "aborted by an operator")
                return "aborted by an operator" + (f": {runner.scrubbed(message)}" if message else "")
        return None

    def abort_waiting(self) -> bool:
        """Whether an operator's abort is in the journal, not read yet."""
        runner = self.runner
        self.looked_at = trio.current_time()
        return any(kind == "abort" and consumed_at is None for _n, kind, _m, consumed_at
                   in runner.handle.controls_after(self.controls_seen))

    def call_started(self, iteration: int) -> None:
        """The call of turn ``iteration`` starts: the watch looks a poll after the runner's own
        look, just before the call's gate (at once if the gate took longer), then every poll."""
        self._watched = iteration
        self._wake_at(self.looked_at + CONTROL_POLL_S)

    def call_ended(self) -> None:
        """The call has its receipt: the watch sleeps until the next call starts."""
        self._watched = None
        self._wake_at(float("inf"))

    def _wake_at(self, when: float) -> None:
        self._due = when
        if self._sleep is not None:
            self._sleep.deadline = when

    async def watch_calls(self) -> None:
        """For the whole loop: while a call runs, an operator's abort ends the loop at once,
        cancelling the call (the runner gives it its receipt). One task for the run, asleep
        between calls; the runner moves its wake-up as each call starts and ends
        (``call_started``, ``call_ended``): no task, nursery or timer per call. Returns once an
        abort ended the loop."""
        while True:
            with trio.CancelScope(deadline=self._due) as self._sleep:
                await trio.sleep_forever()
            self._sleep = None
            iteration = self._watched
            if iteration is None or trio.current_time() < self._due:
                continue  # the call ended (another may have started) before the watch woke
            if self.abort_waiting():
                why = self.read_controls(iteration + 1, live=True, iteration=iteration)
                if why is not None:
                    self.aborted = why
                    self.runner.cancel_loop()
                    return
            self._due = self.looked_at + CONTROL_POLL_S

    def late_controls(self, outcome: str) -> None:
        """Controls that arrived after the run's last model request: the run ended as it would
        have, and each is recorded as having come too late (so nothing an operator sent vanishes)."""
        runner = self.runner
        run = runner.handle
        it = runner.ledger.iterations
        for n, kind, message, consumed_at in run.controls_after(self.controls_seen):
            self.controls_seen = n + 1
            if kind == RAISE or consumed_at is not None or not run.control_holds(n, kind):
                continue
            run.consume_control(n, it)
            said = message or ("aborted by an operator" if kind == "abort" else "")
            runner.record_supervisor(it, "operator", kind, f"{said} (arrived after the run's last model request;"
                                                           f" the run ended {outcome} as it would have)")

    # -- rules and the judge -----------------------------------------------------------------

    async def after_turn(self, iteration: int) -> Ending | None:
        """Rules, then the judge when due; returns how the loop ends, or None."""
        if self.spec is None:
            return None
        state = SupervisorState(iteration=iteration, proposals=dict(self.proposals), effects_run=dict(self.effects_run),
                                fractions=self.runner.ledger.fractions(), fired=dict(self.fired),
                                per_tool={k: dict(v) for k, v in self.runner.state.per_tool.items()},
                                convergence=self.convergence.seen())
        for hit in check_rules(self.spec.rules, state):
            self.fired[hit.rule_index] = iteration
            ended = self._act(iteration, hit.rule_name, hit.action, hit.reason, hit.steer_message)
            if ended is not None:
                return ended
        judge = self.spec.judge
        if judge is not None and iteration % self.spec.every_n_iterations == 0:
            return await self._judge(iteration, judge)
        return None

    def _act(self, iteration: int, rule: str, action: str, reason: str, steer: str | None = None) -> Ending | None:
        self.runner.record_supervisor(iteration, rule, action, reason)
        if action == "abort":
            who = "the judge" if rule == "judge" else f"the supervisor rule {rule}"
            return "aborted", f"{who} aborted the run: {quoted(reason)}"
        if action == "pause":
            # a resumed run passes the pause it was resumed from
            return None if (iteration, rule) in self.runner.resumed_pauses else ("paused", reason)
        if action == "steer":
            self.runner.steer.append(steer or self.spec.steer_message or reason)  # type: ignore[union-attr]
        return None

    async def _judge(self, iteration: int, judge: Any) -> Ending | None:
        r = self.runner
        why = self.read_controls(iteration + 1, live=not r.models.will_reuse("judge"), iteration=iteration)
        if why is not None:  # operators are read before every model request, the judge's too
            return "aborted", why
        trajectory = Trajectory(goal=r.spec.goal, steps=tuple(self.steps),
                                used=r.ledger.usage(), left=r.ledger.left())
        try:
            answer = await r.ask("judge", judge_messages(judge.prompt, trajectory, r.spec.prompts))
        except ProviderFailed as exc:
            return self._judge_error(iteration, f"the judge's provider failed: {r.scrubbed(str(exc))}")
        verdict = parse_verdict(answer.reply.text)
        if isinstance(verdict, Malformed):
            cut = f"it was {CUT}; " if answer.reply.cut else ""
            return self._judge_error(iteration, f"the judge's reply is malformed: {cut}{verdict.why}")
        if verdict.verdict == "continue":
            r.record_supervisor(iteration, "judge", "continue", verdict.reason)
            return None
        return self._act(iteration, "judge", self.spec.on_violation or "abort", verdict.reason)  # type: ignore[union-attr]

    def _judge_error(self, iteration: int, reason: str) -> Ending | None:
        action = self.spec.on_judge_error  # type: ignore[union-attr]
        if action == "ignore":
            self.runner.record_supervisor(iteration, "judge", "continue", reason)
            return None
        return self._act(iteration, "judge", action, reason)
