"""Runners get a narrow handle on their run (engine/handle.py), not the session: what they settle,
record, pause and journal through it lands in the run's journal, and operators' controls are read
and consumed through it."""

from __future__ import annotations

from conftest import APP
from toolloop_cli.contract.registry import load_registry
from toolloop_cli.engine.call import not_run_receipt
from toolloop_cli.engine.handle import RunHandle
from toolloop_cli.engine.session import RunnerEnd, RunOptions, RunSession
from toolloop_cli.store import Store


class Probe:
    """A runner that does through its handle what the lanes and routed runners do."""

    def __init__(self) -> None:
        self.got: object = None
        self.controls: list = []

    def begin(self, session: RunSession) -> None:
        session.store.create_run({
            "run_id": session.run_id, "mode": "sequential", "plan_path": "<probe>", "plan_sha256": "0" * 64,
            "registry_path": str(APP / "registry.yml"), "contract_sha256": session.ctx.contract.contract_sha256,
            "options": {}, "parallel_batch_id": None, "total_calls": 2, "lease_owner": session.owner})

    async def __call__(self, run: RunHandle) -> RunnerEnd:
        self.got = run
        tool = run.ctx.contract.subagents["t"].tools["echo"]
        run.record({"type": "decision", "run_id": run.run_id, "iteration": 1, "action": "call"})
        run.settle(not_run_receipt(run.ctx, tool, {"a": 1}, seq=0, item_key=None, call_key="c0",
                                   status="denied", message="no"))
        run.skip(1)
        run.model_answer({"type": "model_answer", "run_id": run.run_id, "n": 1, "role": "router", "model": "m",
                          "request_sha256": "0" * 64, "text": "{}", "input_tokens": 1, "output_tokens": 2,
                          "duration_ms": 1.0})
        for n, kind, message, consumed in run.controls_after(0):
            if consumed is None and run.control_holds(n, kind):
                run.consume_control(n, 3)
                self.controls.append((kind, message))
        run.pause(None, "c1")
        await run.synced()
        return RunnerEnd(stopped=bool(run.state.paused))


def test_a_runner_gets_a_handle_and_its_records_land_in_the_journal(tmp_path):
    contract, problems = load_registry(str(APP / "registry.yml"))
    assert contract is not None, problems
    store = Store(tmp_path / "state")
    printed: list[dict] = []
    session = RunSession(store, printed.append, RunOptions(handle_signals=False), run_id="run1", contract=contract,
                         mode="sequential", subagent="t", total_calls=2, owner="me")
    store.add_control("run1", "steer", "look again")
    probe = Probe()
    result = session.run(probe)
    assert isinstance(probe.got, RunHandle) and not isinstance(probe.got, RunSession)
    for wide in ("store", "options", "journal", "run", "emit"):  # the session's, not the runner's
        assert not hasattr(probe.got, wide), wide
    assert probe.controls == [("steer", "look again")]
    assert store.controls_after("run1", 0)[0][3] == 3  # consumed at the turn the runner said
    assert [r["type"] for r in printed] == ["decision", "receipt", "summary"]
    assert result.summary["status"] == "stopped" and result.summary["counts"]["denied"] == 1
    assert [a["text"] for a in store.model_answers_of("run1")] == ["{}"]
    assert [rec["type"] for _before, rec in store.records_of("run1")] == ["decision"]
    store.close()
