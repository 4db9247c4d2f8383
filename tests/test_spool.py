"""Lanes from --lanes are journaled as they are admitted and read back a page at a time."""

from __future__ import annotations

import json
import sqlite3

import pytest

from conftest import APP, jsonl, write

REG = APP / "registry.yml"
CANARY = "canary-pw-7731"


def plan(tmp_path):
    return write(tmp_path / "plan.yml", json.dumps({
        "version": 1, "registry": str(REG), "subagent": "t", "mode": "parallel", "max_concurrency": 3,
        "lanes": [{"item_key": "inline", "calls": [{"tool": "echo", "args": {"inline": True}}]}]}))


def lanes_file(tmp_path, n: int, secret_every: int = 0):
    path = tmp_path / "lanes.jsonl"
    with open(path, "w") as fh:
        for i in range(n):
            calls = [{"call_key": "e", "tool": "echo", "args": {"i": i}}]
            if secret_every and i % secret_every == 0:
                calls.append({"call_key": "s", "tool": "secret_echo", "args": {"user": f"u{i}", "password": CANARY}})
            fh.write(json.dumps({"item_key": f"k{i}", "calls": calls}) + "\n")
    return path


def test_streamed_lanes_run_in_order_after_the_plan_files(cli, tmp_path):
    n = 1000  # several pages of the spool
    proc = cli("run", str(plan(tmp_path)), "--lanes", str(lanes_file(tmp_path, n, secret_every=97)))
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    records = jsonl(proc.stdout)
    receipts = records[:-1]
    assert receipts[0]["item_key"] == "inline"
    assert [r["seq"] for r in receipts] == list(range(len(receipts)))
    echo = [r for r in receipts if r["tool"] == "echo"][1:]
    assert [r["result"]["received"]["i"] for r in echo] == list(range(n))
    secret = [r for r in receipts if r["tool"] == "secret_echo"]
    # the callable got the real password (its token quotes it), the output never shows it
    assert len(secret) == 11 and all(r["status"] == "ok" for r in secret)
    assert all(r["args"]["password"] == "[REDACTED]" and r["result"]["token"] == "[REDACTED]" for r in secret)
    assert CANARY.encode() not in proc.stdout
    db = tmp_path / ".toolloop" / "state.db"
    con = sqlite3.connect(db)
    assert con.execute("SELECT count(*) FROM lanes").fetchone()[0] == n + 1
    assert con.execute("SELECT count(*) FROM calls").fetchone()[0] == len(receipts)
    con.close()
    for f in (tmp_path / ".toolloop").iterdir():
        assert CANARY.encode() not in f.read_bytes(), f


def test_a_rejected_stream_leaves_nothing_in_the_journal(cli, tmp_path):
    path = lanes_file(tmp_path, 600)
    with open(path, "a") as fh:
        fh.write('{"item_key": "bad", "calls": [{"tool": "nope"}]}\n')
    proc = cli("run", str(plan(tmp_path)), "--lanes", str(path))
    assert proc.returncode == 3
    assert b"lanes.jsonl:601:1: error TL402" in proc.stderr
    con = sqlite3.connect(tmp_path / ".toolloop" / "state.db")
    assert con.execute("SELECT count(*) FROM lanes").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM calls").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
    con.close()


def test_a_streamed_run_can_be_shown_again(cli, tmp_path):
    proc = cli("run", str(plan(tmp_path)), "--lanes", str(lanes_file(tmp_path, 300)))
    assert proc.returncode == 0
    run_id = jsonl(proc.stdout)[-1]["run_id"]
    shown = cli("runs", "show", run_id, "--format", "jsonl")
    assert shown.stdout == proc.stdout


def test_admission_hands_streamed_lanes_to_the_spool_not_to_memory(tmp_path):
    from toolloop_cli.engine.spool import LaneSpool
    from toolloop_cli.plan.admit import admit_plan
    from toolloop_cli.store import Store

    store = Store(tmp_path / "state")
    spool = LaneSpool(store, "run-x", page=64)
    with open(lanes_file(tmp_path, 500, secret_every=50), "rb") as fh:
        admitted = admit_plan(plan(tmp_path), lanes=fh, spool=spool)
    assert [lane.item_key for lane in admitted.lanes] == ["inline"]  # only the plan file's lane in memory
    assert admitted.lane_count == 501 and admitted.total_calls == 1 + 500 + 10
    con = sqlite3.connect(store.path)
    assert con.execute("SELECT count(*) FROM lanes WHERE run_id='run-x'").fetchone()[0] >= 448  # pages written
    con.close()
    lanes = list(admitted.all_lanes())
    assert [lane.index for lane in lanes] == list(range(501))
    secret_calls = [c for lane in lanes for c in lane.calls if c.tool.id == "secret_echo"]
    assert [c.args["password"] for c in secret_calls] == [CANARY] * 10  # kept in memory, not journaled
    assert CANARY.encode() not in store.path.read_bytes()
    store.close()


@pytest.mark.parametrize("keep", [10_000, 100, 0], ids=["keys-held-while-kept", "kept-then-filter", "filter"])
def test_a_duplicate_item_key_pages_after_the_first_is_found_in_the_journal(tmp_path, keep):
    """Whether the keys are held (the lanes kept in memory), handed to the filter and the journal
    when the spool stops keeping (keep=100: the first key before, its duplicate after), or in the
    filter from the start, the same duplicates are found with the same lanes named."""
    from toolloop_cli.engine.spool import LaneSpool
    from toolloop_cli.errors import ConfigError
    from toolloop_cli.plan.admit import admit_plan
    from toolloop_cli.store import Store

    path = lanes_file(tmp_path, 300)
    with open(path, "a") as fh:  # line 301 repeats the key of line 5, journaled pages before
        fh.write(json.dumps({"item_key": "k4", "calls": [{"tool": "echo", "args": {}}]}) + "\n")
        fh.write(json.dumps({"item_key": "inline", "calls": [{"tool": "echo", "args": {}}]}) + "\n")
        fh.write(json.dumps({"item_key": "k150", "calls": [{"tool": "echo", "args": {}}]}) + "\n")
        fh.write(json.dumps({"item_key": "k300", "calls": [{"tool": "echo", "args": {}}]}) + "\n")
    store = Store(tmp_path / "state")
    spool = LaneSpool(store, "run-d", page=16, keep_calls=keep)
    with open(path, "rb") as fh:
        try:
            admit_plan(plan(tmp_path), lanes=fh, spool=spool)
        except ConfigError as exc:
            problems = [(p.line, p.code, p.message) for p in exc.problems]
        else:
            raise AssertionError("duplicates admitted")
    store.close()
    assert spool.keeping == (keep == 10_000)
    # lane 0 is the plan file's, so line 5 of the file is lane 5; k300 is new
    assert problems == [(301, "TL405", "duplicate item_key 'k4' (first in lane 5)"),
                        (302, "TL405", "duplicate item_key 'inline' (first in lane 0)"),
                        (303, "TL405", "duplicate item_key 'k150' (first in lane 151)")]


def _lane_rows(lanes):
    return [(lane.index, lane.item_key, lane.payload,
             [(c.seq, c.lane, c.item_key, c.call_key, c.tool.id, c.args, c.args_sha256) for c in lane.calls])
            for lane in lanes]


def test_lanes_kept_in_memory_run_exactly_as_those_read_back_from_the_journal(tmp_path):
    """A run whose lanes fit in memory runs them as admitted; past the cap they are read back from
    the journal. Both give the same lanes, redacted arguments included, and both journal them."""
    from toolloop_cli.engine.spool import LaneSpool
    from toolloop_cli.plan.admit import admit_plan
    from toolloop_cli.store import Store

    path = lanes_file(tmp_path, 300, secret_every=7)
    seen = {}
    for name, keep in (("kept", 10_000), ("over-the-cap", 100), ("journal", 0)):
        store = Store(tmp_path / f"state-{name}")
        spool = LaneSpool(store, f"run-{name}", page=32, keep_calls=keep)
        with open(path, "rb") as fh:
            admitted = admit_plan(plan(tmp_path), lanes=fh, spool=spool)
        assert (spool._kept is not None) == (name == "kept")
        seen[name] = _lane_rows(admitted.all_lanes())
        con = sqlite3.connect(store.path)
        assert con.execute("SELECT count(*) FROM lanes").fetchone()[0] == 300  # journaled either way
        con.close()
        assert CANARY.encode() not in store.path.read_bytes()
        store.close()
    assert seen["kept"] == seen["journal"] == seen["over-the-cap"]
    assert [row[0] for row in seen["kept"]] == list(range(301))
    assert sum(1 for row in seen["kept"] for c in row[3] if c[4] == "secret_echo" and c[5]["password"] == CANARY) == 43



class _Tool:
    id, redact = "echo", ()


@pytest.mark.parametrize("keep", [10_000, 40, 0], ids=["keys-held-while-kept", "kept-then-filter", "filter"])
def test_the_item_key_index_claims_a_key_as_a_dict_would(tmp_path, keep):
    """Admission claims a lane's item key in one look-up (``setdefault``): the lane that holds it
    already, or this one. Against a plain dict over 400 random keys (duplicates of lanes held, of
    lanes still in the spool's page, of lanes in the journal; a key given back by a refused lane
    and claimed again), whether the keys are held, handed to the filter half way or in the filter
    from the start."""
    import random

    from toolloop_cli.engine.spool import LaneSpool
    from toolloop_cli.plan.admit import AdmittedCall, AdmittedLane
    from toolloop_cli.store import Store

    rng = random.Random(27)
    store = Store(tmp_path / "state")
    spool = LaneSpool(store, "run-k", page=8, keep_calls=keep)
    keys = spool.item_keys({"plan-a": 0})
    model = {"plan-a": 0}
    index = 1
    for _ in range(400):
        key = f"k{rng.randrange(150)}" if rng.random() < 0.97 else "plan-a"
        got = keys.setdefault(key, index)
        assert got == model.setdefault(key, index), key
        if got == index and rng.random() < 0.1:  # refused after it was counted: the key goes back
            del keys[key]
            del model[key]
            continue
        spool.add(AdmittedLane(index, key, None, [AdmittedCall(index, index, key, "0", _Tool(), {}, "sha")]))
        index += 1
    assert spool.keeping == (keep == 10_000)
    assert all(keys.get(k) == v for k, v in model.items())
    store.close()


def test_a_key_claimed_while_kept_is_found_after_the_filter_takes_over_before_its_page_is_journaled(tmp_path):
    """The spool stops keeping its lanes half way through a page: the keys claimed while it kept
    them, not journaled yet, are still found once the filter has taken over."""
    from toolloop_cli.engine.spool import LaneSpool
    from toolloop_cli.plan.admit import AdmittedCall, AdmittedLane
    from toolloop_cli.store import Store

    store = Store(tmp_path / "state")
    spool = LaneSpool(store, "run-h", page=8, keep_calls=43)
    keys = spool.item_keys({})

    def lane(key: str, index: int) -> int:
        got = keys.setdefault(key, index)
        spool.add(AdmittedLane(index, key, None, [AdmittedCall(index, index, key, "0", _Tool(), {}, "sha")]))
        return got

    for i in range(44):  # lanes 40..43 are in the page when the spool stops keeping (at 44 calls)
        assert lane(f"u{i}", i) == i
    assert not spool.keeping and len(spool._buffer) == 4
    assert lane("new", 44) == 44  # the first key claimed after: the filter takes over
    assert [lane(f"u{i}", 45 + n) for n, i in enumerate((41, 42, 3))] == [41, 42, 3]
    store.close()
