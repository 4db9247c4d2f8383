"""Lanes from --lanes and --stream: a well-formed line is read without a pydantic model
(``plan.lanes.well_formed``); every line reads, and is admitted or refused, exactly as through
``LaneDecl`` (same lanes, same findings, same messages)."""

from __future__ import annotations

import io
import json
import random

import pytest

from conftest import APP, write
from toolloop_cli.errors import ConfigError
from toolloop_cli.plan import lanes as lane_reading
from toolloop_cli.plan.admit import admit_plan
from toolloop_cli.plan.models import LaneDecl

REG = APP / "registry.yml"

LINES = [
    b'{"item_key": "a", "calls": [{"tool": "echo", "args": {"x": 1}}]}',
    b'{"item_key": "b", "calls": [{"tool": "echo"}, {"tool": "echo", "call_key": "k", "args": null}], "payload": null}',
    b'{"item_key": "c", "payload": {"p": [1, 2.5, "t", null, true]}, "calls": [{"tool": "echo"}]}',
    b'{"item_key": "d", "calls": [{"tool": "echo", "args": {"big": 123456789012345678901234567890}}]}',
    b'{"item_key": "e", "calls": [{"tool": "echo", "args": {"n": NaN}}]}',
    b'{"item_key": "f", "calls": [{"tool": "echo", "args": {"s": "\\ud800"}}]}',
    b'{"item_key": "g", "calls": []}',
    b'{"item_key": 7, "calls": [{"tool": "echo"}]}',
    b'{"item_key": "h", "calls": [{"tool": "echo", "extra": 1}]}',
    b'{"item_key": "i", "calls": [{"tool": "echo"}], "other": 1}',
    b'{"item_key": "j", "calls": [{"tool": 3}]}',
    b'{"item_key": "k", "calls": [{"call_key": "x"}]}',
    b'{"item_key": "l", "calls": [{"tool": "echo", "call_key": 5}]}',
    b'{"item_key": "m", "calls": [{"tool": "echo", "args": [1]}]}',
    b'{"item_key": "n", "calls": [{"tool": "echo"}], "payload": [1]}',
    b'{"item_key": "o", "calls": {"tool": "echo"}}',
    b'{"calls": [{"tool": "echo"}]}',
    b'["item_key"]',
    b'not json',
    b'{"item_key": "p", "item_key": "q", "calls": [{"tool": "echo", "args": {"a": 1, "a": 2}}]}',
    b'{"item_key": "r", "calls": ["echo"]}',
    b'{"item_key": "s", "calls": [{"tool": "echo", "args": {"deep": [[[[[[1]]]]]], "u": "\\u00e9\\ud83d\\ude00"}}]}',
    b'{"item_key": "t", "calls": [{"tool": "nope"}]}',
    b'{"item_key": "a", "calls": [{"tool": "echo", "call_key": "same"}, {"tool": "echo", "call_key": "same"}]}',
]


def _fields(lane) -> tuple:
    return (lane.item_key, lane.payload, [(c.tool, c.call_key, c.args) for c in lane.calls])


def _mutations(rng: random.Random) -> list[bytes]:
    values = ["s", 1, 1.5, None, True, [], {}, {"a": 1}, [{"tool": "echo"}], 2 ** 70]
    out = []
    for _ in range(400):
        lane: dict = {"item_key": f"k{rng.randint(0, 9)}",
                      "calls": [{"tool": "echo", "args": {"i": rng.randint(0, 9)}} for _ in range(rng.randint(1, 3))]}
        if rng.random() < 0.3:
            lane["payload"] = {"p": rng.choice(values)}
        for _ in range(rng.randint(0, 2)):
            where = rng.choice(["lane", "call"])
            calls = [c for c in lane.get("calls") or [] if isinstance(c, dict)] if isinstance(lane.get("calls"), list) else []
            target = rng.choice(calls) if where == "call" and calls else lane
            key = rng.choice(["item_key", "calls", "payload", "tool", "call_key", "args", "zzz"])
            if rng.random() < 0.2:
                target.pop(key, None)
            else:
                target[key] = rng.choice(values)
        out.append(json.dumps(lane).encode())
    return out


@pytest.mark.parametrize("raw", LINES + _mutations(random.Random(27)))
def test_a_line_read_without_a_model_is_the_lane_the_model_reads(raw):
    fast = lane_reading.well_formed(raw)
    try:
        model = LaneDecl.model_validate_json(raw)
    except Exception:  # noqa: BLE001 - any refusal: the fast path must refuse it too
        model = None
    if fast is not None:
        assert model is not None and _fields(fast) == _fields(model)
    elif model is not None:  # a lane goes the slow way only for what orjson cannot read exactly
        assert b"1234567890123456789" in raw or b"1180591620717411303424" in raw or b"NaN" in raw


def plan(tmp_path):
    return write(tmp_path / "plan.yml", json.dumps({
        "version": 1, "registry": str(REG), "subagent": "t", "mode": "parallel", "max_concurrency": 2,
        "lanes": []}))


def _admit(tmp_path, body: bytes, stream: bool):
    try:
        admitted = admit_plan(plan(tmp_path), lanes=io.BytesIO(body), lanes_name="in.jsonl", stream=stream)
    except ConfigError as exc:
        return None, [(p.file, p.line, p.code, p.path, p.message, p.hint) for p in exc.problems]
    if not stream:
        return [_fields_admitted(lane) for lane in admitted.lanes], []
    read = []
    while batch := admitted.stream.next_lanes():
        read.extend(batch)
    return ([_fields_admitted(x) if hasattr(x, "index") else (x.item_key, x.calls, [(p.line, p.code, p.path, p.message) for p in x.problems])
             for x in read], [])


def _fields_admitted(lane) -> tuple:
    return (lane.index, lane.item_key, lane.payload,
            [(c.seq, c.call_key, c.tool.id, c.args, c.args_sha256) for c in lane.calls])


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("lines", [LINES, LINES[:4] + LINES[19:22], _mutations(random.Random(5))[:80]])
def test_admission_finds_the_same_lanes_and_problems_with_and_without_the_fast_path(tmp_path, monkeypatch,
                                                                                   stream, lines):
    body = b"\n".join(lines) + b"\n"
    fast = _admit(tmp_path, body, stream)
    monkeypatch.setattr(lane_reading, "well_formed", lambda raw: None)
    slow = _admit(tmp_path, body, stream)
    assert fast == slow
    if lines is not LINES or stream:  # a stream's refusals are its rejected lanes, compared above
        return
    # the refusals say where and what, as before
    assert ("in.jsonl", 7, "TL203", "calls", "'calls' must not be empty", "add at least one item") in fast[1]
    assert ("in.jsonl", 9, "TL201", "calls[0].extra", "unknown key 'extra'", "allowed keys: args, call_key, tool") in fast[1]
