"""How a routed turn's call becomes a receipt, and what the model is shown of it (a part of
``RoutedRunner``, which brings the handle, the recording, the ledger and the supervision): a
receipt kept from the journal (resume) or replayed from a recording, a write a fork refuses, a
call whose redacted arguments the journal withheld, or the gates and then the call, its receipt
settled and counted before anything else can end the loop."""

from __future__ import annotations

from typing import Any

from ..receipts import Receipt
from ..router.observations import observe_masked, observe_receipt, observe_withheld
from ..router.views import Observation
from .call import execute_call, not_run_receipt
from .child_runs import ChildPaused
from .endings import InFlight
from .endings import LoopEnd as _End
from .gates import Refuse, Wait, check_call
from .guardrails import check_observation
from .rerun import IN_FLIGHT, copies_start, counts_as_made


class LoopCalls:
    """The routed runner's calls (a part of ``RoutedRunner``)."""

    #: on resume, the recorded receipt the call being settled replaces (it runs again), or None
    _replaced: dict | None = None

    async def _observe(self, it: int, tool: str, receipt: Receipt) -> Observation:
        """What the model sees of a receipt, after the observation guardrails. A call run again
        on resume whose observation differs from what the model was told of its recorded receipt
        ends the reuse of the recorded answers: they were given on what the model no longer sees."""
        observation = await self._observed(it, tool, receipt, record=True)
        replaced, self._replaced = self._replaced, None
        if replaced is not None and replaced.get("seq") == receipt.seq and self.models.replaying:
            old = Receipt.from_record(replaced)
            same = (old.status, old.result, old.error, old.args) == (receipt.status, receipt.result, receipt.error,
                                                                      receipt.args)
            # the guards are asked about the recorded receipt only when it differs from the new one
            if not same and await self._observed(it, tool, old, record=False) != observation:
                self.models.went_past()
        return observation

    async def _observed(self, it: int, tool: str, receipt: Receipt, *, record: bool) -> Observation:
        value = receipt.result if receipt.status == "ok" else receipt.error
        acts = await check_observation(self.spec.observation_guards, tool, receipt.status, value)
        for act in acts if record else ():
            self._record_guard(it, act.guard, tool, act.action, act.reason)
        if acts and acts[-1].action == "block":
            return observe_withheld(it, tool, receipt.status, acts[-1].reason or "blocked", args=receipt.args)
        if acts:
            return observe_masked(it, tool, receipt.status, acts[-1].value, args=receipt.args)
        return observe_receipt(it, tool, receipt.status, value, args=receipt.args)

    def _count(self, tool: Any, args: dict, receipt: Receipt) -> None:
        """A settled (or kept) receipt of this loop, counted where the summary's ``loop`` looks."""
        self.ran.add((tool.id, self._sha(args)))
        self.ledger.count_tool_call()
        self.state.ran(tool.id, receipt.status)
        self.supervision.settled(tool.id, receipt)
        if counts_as_made(receipt, self._journal_started()):
            self.supervision.ran(tool.effect)

    async def _receipt(self, it: int, tool: Any, args: dict, *, withheld: bool = False) -> Receipt:
        """The call's receipt: kept from the journal (resume), or from the gates and the call;
        ``interrupted`` when its arguments held a redacted value the journal withheld."""
        run = self.handle
        seq = self.seq
        kept = self._kept(seq, tool)
        if kept is not None:
            self.seq += 1
            run.keep(kept)
        else:
            kept = self._replayed(seq, tool, it)
            if kept is not None:
                self.seq += 1
                run.settle(kept)
        if kept is not None:
            if counts_as_made(kept, self._journal_started()):  # it ran (or may have): it counts toward max_calls again
                run.ctx.ledger.count(tool)
            self._count(tool, args, kept)
            return kept
        self._replaced = self.recording.replaced_receipt(seq, tool) if self.recording is not None else None
        refused = self.recording.fork.refusal(it, tool) if self.recording and self.recording.fork else None
        if refused is not None:  # a fork's live turns make no write unless asked to
            self.seq += 1
            receipt = not_run_receipt(run.ctx, tool, args, seq=seq, item_key=None, call_key=str(it), iteration=it,
                                      status="denied", message=refused)
            run.settle(receipt)
            self._count(tool, args, receipt)
            return receipt
        if withheld:
            self.seq += 1
            receipt = not_run_receipt(run.ctx, tool, args, seq=seq, item_key=None, call_key=str(it), iteration=it,
                                      status="interrupted", message=(
                                          "its arguments held a value the model proposed for a redacted field, which"
                                          " the journal never stores, so the call cannot be rebuilt from it"))
            run.settle(receipt)
            self._count(tool, args, receipt)
            return receipt
        if not self.models.replaying and self.supervision.abort_waiting():
            # an abort that came while the model proposed this call: the call does not start
            why = self.supervision.read_controls(it + 1, live=True, iteration=it)
            if why is not None:
                raise _End("aborted", why=why)
        receipt = await self._run_gated(it, tool, args)
        return receipt

    async def _run_gated(self, it: int, tool: Any, args: dict) -> Receipt:
        """The gates, then the call; its receipt settled and counted before anything else can end
        the loop (an abort read while it runs cancels it, and ``_cut_short`` gives it its receipt)."""
        run, ctx = self.handle, self.handle.ctx
        seq, call_key = self.seq, str(it)
        await self.committed()  # the answer and the decision this call comes from, before its gate
        verdict = await check_call(ctx, tool, args, source="model", item_key=None, call_key=call_key)
        if isinstance(verdict, Wait):
            run.pause(None, call_key)
            raise _End("paused")
        self.seq += 1
        if isinstance(verdict, Refuse):
            receipt = not_run_receipt(ctx, tool, verdict.args, seq=seq, item_key=None, call_key=call_key,
                                      status=verdict.status, message=verdict.message, iteration=it,
                                      approval=verdict.approval)
        elif self._in_flight_write(seq, tool):
            receipt = not_run_receipt(ctx, tool, args, seq=seq, item_key=None, call_key=call_key, iteration=it,
                                      status="interrupted", message=IN_FLIGHT)
            ctx.ledger.count(tool)  # it may have happened: one call of its tool
        else:
            self._current = InFlight(it, tool, verdict.args, seq, verdict.approval)
            paused = None
            watch = self.supervision
            if not self.models.replaying:
                watch.call_started(it)  # the run's watch for aborts looks out for this call
            try:
                receipt, _value, _env = await execute_call(ctx, tool, verdict.args, seq=seq, item_key=None,
                                                           call_key=call_key, iteration=it, approval=verdict.approval)
            except ChildPaused as exc:  # a child run waits for a person: so does this loop
                paused, self.budgets.child = exc, exc.paused_by
            else:  # settled before the call's watch ends: an abort read now cannot lose it
                self._current = None
                run.settle(receipt)
                self._count(tool, args, receipt)
            finally:
                watch.call_ended()
            if paused is not None:
                self._current = None
                run.pause(None, call_key, paused.child_run_id)
                raise _End("paused")
            return receipt
        run.settle(receipt)
        self._count(tool, args, receipt)
        return receipt

    def _replayed(self, seq: int, tool: Any, it: int) -> Receipt | None:
        """On replay, the recorded receipt as this run's own (new ids, this run's completion order)."""
        if self.recording is None or not self.recording.replay:
            return None
        rec = self.recording.replayed_receipt(seq, tool, it)
        if rec is None:
            return None
        ctx = self.handle.ctx
        if copies_start(rec, self.recording.started) and ctx.services.before_start is not None:
            ctx.services.before_start((seq, tool, rec.get("args_sha256")))  # a write in flight: this journal's too
        return Receipt.from_record({**rec, "run_id": ctx.run_id, "receipt_id": ctx.sequence.new_receipt_id(),
                                    "completion_seq": ctx.sequence.next_completion(), "iteration": it})

    def _kept(self, seq: int, tool: Any) -> Receipt | None:
        rec = self.recording.kept_receipt(seq, tool) if self.recording is not None else None
        return Receipt.from_record(rec) if rec is not None else None

    def _journal_started(self) -> set[int]:
        return self.recording.started if self.recording is not None else set()

    def _in_flight_write(self, seq: int, tool: Any) -> bool:
        return self.recording is not None and self.recording.write_in_flight(seq, tool)
