"""a fork of a tainted recording is tainted from the recorded turn."""
from test_taint import FINAL, ANSWER, call, plan, scripted, start, receipts, Records
from toolloop_cli.engine.launch import Launch


def fork(tmp_path, run_id, turn, provider, **kw):
    launch = Launch(tmp_path / "state")
    sink = Records()
    result = launch.start(launch.fork(run_id, turn, **kw), sink, providers={"openai": provider}, handle_signals=False)
    return sink.got, result.summary


def test_a_fork_from_after_the_taint_is_tainted(tmp_path):
    target = tmp_path / "out.txt"
    p = plan(tmp_path, taint="taint: {on_write: deny}")
    records, summary = start(tmp_path, p, scripted(call("lookup", {"a": 1}), call("inbox", {"m": "x"}),
                                                   call("lookup", {"b": 2}), FINAL, ANSWER))
    assert summary["tainted_by"]["iteration"] == 2
    got, forked = fork(tmp_path, summary["run_id"], 3, scripted(call("send", {"path": str(target)}), FINAL, ANSWER),
                       execute_writes=True)
    assert forked["tainted_by"] == summary["tainted_by"]
    send = [r for r in receipts(got) if r["tool"] == "send"][0]
    assert send["status"] == "denied" and send["taint"] == summary["tainted_by"], send
    got, early = fork(tmp_path, summary["run_id"], 2, scripted(call("lookup", {"c": 3}), FINAL, ANSWER))
    assert early["tainted_by"] is None  # from turn 2 live: the model never read the inbox
