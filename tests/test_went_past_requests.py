"""A model answer set aside as went past keeps its request when that request was journaled as a
delta (``_request_delta.py``) against an answer that a later divergence replaced: ``went_past_of``
(what ``runs export`` gives under the manifest's ``went_past``) rebuilds each move's requests on
the answers that were the run's when that move was made, so the request is shown, and shown right
(the CRC check of the delta holds). A real state database; the records journaled in the form the
routed runner journals them."""

from __future__ import annotations

import pytest

from toolloop_cli._request_delta import RequestChain
from toolloop_cli.store import Store

RID = "r1"


def request(*turns: str) -> str:
    # each request repeats every earlier turn, as a router's does
    return "system: find x\n" + "".join(f"turn {t}\n" for t in turns) + "budgets left: plenty\n"


class Run:
    """One session of a routed run journaling answers: its requests as deltas against the last
    one it journaled (a resumed session starts its own chain, as the runner does)."""

    def __init__(self, store: Store) -> None:
        self.store, self.chain = store, RequestChain()

    def answer(self, n: int, *turns: str) -> str:
        text = request(*turns)
        record = {"type": "model_answer", "run_id": RID, "n": n, "role": "router", "request_sha256": f"h{n}",
                  "request": text, "model": "m", "text": f"answer {n} {turns[-1]}", "input_tokens": 1,
                  "output_tokens": 1}
        self.store.put_model_answer(self.chain.journal_form(record))
        return text


@pytest.fixture
def store(tmp_path):
    """A state database holding the routed run ``RID``, no answer journaled yet."""
    opened = Store(tmp_path)
    opened.create_run({"run_id": RID, "mode": "routed", "plan_path": "p", "plan_sha256": "x", "registry_path": "r",
                       "contract_sha256": "c", "options": {}, "total_calls": 0})
    yield opened
    opened.close()


def test_went_past_answers_keep_their_requests_when_their_base_is_replaced_later(store):
    first = Run(store)
    sent = {n: first.answer(n, *"abcde"[:n]) for n in range(1, 6)}
    # a resumed session goes another way at answer 4: 4 and 5 are set aside (deltas on 3)
    store.move_went_past(RID, 4, 10, 1.0)
    second = Run(store)
    second.answer(4, "a", "b", "c", "D")
    # a later one goes another way at answer 3: the 3 that 4 and 5 were deltas on goes too
    store.move_went_past(RID, 3, 5, 2.0)
    third = Run(store)
    third.answer(3, "a", "b", "Z")

    moved = store.went_past_of(RID)
    assert [(m["kind"], m["ref"], m["at"]) for m in moved] == [
        ("model_answer", 4, 1.0), ("model_answer", 5, 1.0), ("model_answer", 3, 2.0), ("model_answer", 4, 2.0)]
    got = [m["record"].get("request") for m in moved]
    assert got == [sent[4], sent[5], sent[3], request("a", "b", "c", "D")]
    assert all("request_delta" not in m["record"] for m in moved)
    # the run's own answers are rebuilt on its own path
    assert [a.get("request") for a in store.model_answers_of(RID)] == [sent[1], sent[2], request("a", "b", "Z")]


def test_moves_with_increasing_numbers_are_each_rebuilt_on_the_answers_of_their_time(store):
    first = Run(store)
    sent = {n: first.answer(n, *"abc"[:n]) for n in range(1, 4)}
    store.move_went_past(RID, 3, 10, 1.0)  # 3 went past
    second = Run(store)
    second.answer(3, "a", "b", "C")
    second.answer(4, "a", "b", "C", "d")
    second.answer(5, "a", "b", "C", "d", "e")
    store.move_went_past(RID, 5, 10, 2.0)  # 5 went past: a delta on the new 4, not on the 3 moved first
    moved = store.went_past_of(RID)
    assert [(m["ref"], m["record"].get("request")) for m in moved] == [
        (3, sent[3]), (5, request("a", "b", "C", "d", "e"))]
