"""People and rules in charge of a routed run: supervisor rules and the judge after each turn, and
operators' steer and abort read from the journal before each turn.

Every rule hit, verdict, judge error and operator action is a ``supervisor`` record. What it does:
``abort`` ends the loop (outcome ``aborted``), ``pause`` ends it resumable (outcome ``paused``),
``steer`` adds a message to the next turn, ``continue`` (a judge's verdict) does nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..router.judge import judge_messages, parse_verdict
from ..router.supervisor import SupervisorState, check_rules
from ..router.views import Malformed, Step, Trajectory, Usage
from .controls import control_holds
from .model_calls import ProviderFailed

if TYPE_CHECKING:
    from .routed import RoutedRunner


class Supervision:
    """The supervisor of one routed run (rules, judge) and the operator controls it reads."""

    def __init__(self, runner: RoutedRunner):
        self.runner = runner
        self.spec = runner.spec.supervisor
        self.fired: dict[int, int] = {}  # rule index -> iteration it last fired
        self.proposals: dict[tuple[str, str], int] = {}
        self.effects_run: dict[str, int] = {}
        self.steps: list[Step] = []
        self.controls_seen = 0

    # -- what the runner tells it ------------------------------------------------------------

    def proposed(self, tool: str | None, args_sha: str | None) -> None:
        if tool is not None and args_sha is not None:
            self.proposals[(tool, args_sha)] = self.proposals.get((tool, args_sha), 0) + 1

    def ran(self, effect: str) -> None:
        self.effects_run[effect] = self.effects_run.get(effect, 0) + 1

    def step(self, step: Step) -> None:
        self.steps.append(step)

    # -- operators ---------------------------------------------------------------------------

    def read_controls(self, iteration: int) -> str | None:
        """Steer and abort written by ``toolloop steer`` / ``abort`` since the last turn: steer
        messages go to the next turn; returns ``"aborted"`` when an operator aborted."""
        runner = self.runner
        store, run_id = runner.session.store, runner.session.run_id
        ended = None
        for n, kind, message, consumed_at in store.controls_after(run_id, self.controls_seen):
            if consumed_at is not None and consumed_at > iteration:
                break  # read at a later turn of the run this resume replays
            self.controls_seen = n + 1
            if not control_holds(store, run_id, n, kind, runner.session.options.on_warning):
                continue
            if consumed_at is None:
                store.consume_control(run_id, n, iteration)
            if kind == "steer":
                runner.steer.append(message)
                runner.record_supervisor(iteration, "operator", "steer", message)
            else:
                runner.record_supervisor(iteration, "operator", "abort", message or "aborted by an operator")
                ended = "aborted"
        return ended

    # -- rules and the judge -----------------------------------------------------------------

    def _fractions(self) -> dict[str, float]:
        r = self.runner
        b, s = r.spec.budget, r.state
        out = {
            "iterations": s.iterations / b.max_iterations,
            "tokens": s.tokens / b.max_tokens,
            "tool_calls": s.tool_calls / b.max_tool_calls if b.max_tool_calls else 0.0,
            "time": r.seconds_spent() / b.timeout_s,
        }
        if b.max_cost_usd:
            out["cost"] = (s.cost_usd or 0.0) / b.max_cost_usd
        return out

    async def after_turn(self, iteration: int) -> str | None:
        """Rules, then the judge when due; returns the outcome that ends the loop, or None."""
        if self.spec is None:
            return None
        state = SupervisorState(iteration=iteration, proposals=dict(self.proposals), effects_run=dict(self.effects_run),
                                fractions=self._fractions(), fired=dict(self.fired))
        for hit in check_rules(self.spec.rules, state):
            self.fired[hit.rule_index] = iteration
            ended = self._act(iteration, hit.rule_name, hit.action, hit.reason)
            if ended is not None:
                return ended
        judge = self.spec.judge
        if judge is not None and iteration % self.spec.every_n_iterations == 0:
            return await self._judge(iteration, judge)
        return None

    def _act(self, iteration: int, rule: str, action: str, reason: str) -> str | None:
        self.runner.record_supervisor(iteration, rule, action, reason)
        if action == "abort":
            return "aborted"
        if action == "pause":
            # a resumed run passes the pause it was resumed from
            return None if (iteration, rule) in self.runner.resumed_pauses else "paused"
        if action == "steer":
            self.runner.steer.append(self.spec.steer_message or reason)  # type: ignore[union-attr]
        return None

    async def _judge(self, iteration: int, judge: Any) -> str | None:
        r = self.runner
        s = r.state
        trajectory = Trajectory(goal=r.spec.goal, steps=tuple(self.steps),
                                used=Usage(s.iterations, s.tokens, s.tool_calls, r.seconds_spent(), s.cost_usd),
                                left=r.budgets())
        try:
            answer = await r.ask("judge", judge_messages(judge.prompt, trajectory, r.spec.prompts))
        except ProviderFailed as exc:
            return self._judge_error(iteration, f"the judge's provider failed: {r.scrubbed(str(exc))}")
        verdict = parse_verdict(answer.reply.text)
        if isinstance(verdict, Malformed):
            return self._judge_error(iteration, f"the judge's reply is malformed: {verdict.why}")
        if verdict.verdict == "continue":
            r.record_supervisor(iteration, "judge", "continue", verdict.reason)
            return None
        return self._act(iteration, "judge", self.spec.on_violation or "abort", verdict.reason)  # type: ignore[union-attr]

    def _judge_error(self, iteration: int, reason: str) -> str | None:
        action = self.spec.on_judge_error  # type: ignore[union-attr]
        if action == "ignore":
            self.runner.record_supervisor(iteration, "judge", "continue", reason)
            return None
        return self._act(iteration, "judge", action, reason)
