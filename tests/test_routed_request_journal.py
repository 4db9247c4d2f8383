"""A routed run journals each model request as what it adds to the run's previous request
(``_request_delta.py``), so a run of n turns journals O(n) request text; every reader of the
journal gets each request back whole, exactly as it was sent; a journal whose records carry the
whole ``request`` (written before this form) reads as it did; a damaged or replaced base is
never rebuilt into a request the run did not send."""

from __future__ import annotations

import json
import sqlite3

import pytest

from conftest import APP, write
from toolloop_cli._request_delta import RequestChain, common_prefix, rebuilt
from toolloop_cli.engine.model_calls import request_text
from toolloop_cli.engine.run import RunOptions, execute_plan
from toolloop_cli.plan.admit import admit_plan
from toolloop_cli.providers.scripted import ScriptedProvider
from toolloop_cli.store import Store

TURNS = 50


def plan_file(tmp_path) -> str:
    return str(write(tmp_path / "plan.yml", f"""
        version: 1
        registry: {APP / "registry.yml"}
        subagent: t
        mode: routed
        goal: Call echo as often as told, then finish.
        allowed_tools: [echo]
        router_profile: {{provider: openai, model: m}}
        final_profile: {{provider: openai, model: m}}
        budget: {{max_iterations: {TURNS + 5}, max_tokens: 10000000, max_tool_calls: {TURNS + 5}, timeout_s: 300}}
        final_schema: {{type: object}}
    """))


def long_run(tmp_path) -> tuple[str, ScriptedProvider]:
    calls = [json.dumps({"action": "call", "tool": "echo", "args": {"x": i, "pad": "p" * 40}, "reason": "more"})
             for i in range(TURNS - 1)]
    provider = ScriptedProvider([*calls, '{"action": "final", "reason": "enough"}', '{"answer": 1}'])
    store = Store(tmp_path / "state")
    try:
        result = execute_plan(admit_plan(plan_file(tmp_path)), store, lambda _r: None,
                              RunOptions(handle_signals=False, providers={"openai": provider}))
    finally:
        store.close()
    assert result.summary["outcome"] == "final"
    return result.summary["run_id"], provider


def test_a_long_run_journals_request_text_linear_in_its_turns_and_gives_each_request_back_whole(tmp_path):
    run_id, provider = long_run(tmp_path)
    sent = [request_text(r) for r in provider.requests]
    assert len(sent) == TURNS + 1  # TURNS router requests, then the final answer's

    db = sqlite3.connect(tmp_path / "state" / "state.db")
    try:
        journaled = [json.loads(r) for (r,) in db.execute(
            "SELECT record FROM model_answers WHERE run_id=? ORDER BY n", (run_id,))]
    finally:
        db.close()
    stored = sum(len(r.get("request") or r["request_delta"]["text"]) for r in journaled)
    whole = sum(len(t) for t in sent)
    # what each turn adds (an observation, the budgets left), averaged over the router's requests
    router = sent[:TURNS]
    added = (len(router[-1]) - len(router[0])) / (TURNS - 1)
    assert added > 100  # each request really does hold every earlier observation
    # linear: the first request of each role whole, then about what each turn adds
    assert stored <= len(router[0]) + len(sent[-1]) + 3 * TURNS * added
    # where journaling every request whole grows with the square of the run's length
    assert whole > 10 * stored
    assert all("request_delta" in r for r in journaled[1:TURNS])

    store = Store(tmp_path / "state")
    try:
        answers = store.model_answers_of(run_id)
    finally:
        store.close()
    assert [a["request"] for a in answers] == sent
    assert not any("request_delta" in a for a in answers)


def test_a_run_exported_shows_every_request_whole(tmp_path, cli):
    run_id, provider = long_run(tmp_path)
    out = cli("runs", "export", run_id, "--state-dir", str(tmp_path / "state"))
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    answers = [r for r in lines if r.get("type") == "model_answer"]
    assert [a["request"] for a in answers] == [request_text(r) for r in provider.requests]
    assert not any("request_delta" in a for a in answers)


def test_a_journal_with_whole_requests_reads_as_it_did():
    old = [{"type": "model_answer", "n": 1, "role": "router", "request": "[system]\nA\n[user]\nB\n"},
           {"type": "model_answer", "n": 2, "role": "router", "request": "[system]\nA\n[user]\nB C\n"},
           {"type": "model_answer", "n": 3, "role": "router"}]  # a recording that lacks it
    assert rebuilt(old) == old


def test_requests_go_through_the_journal_form_and_back():
    chain = RequestChain()
    texts = [("router", "[system]\nS\n[user]\nobs 1\nleft 9\n"), ("router", "[system]\nS\n[user]\nobs 1\nobs 2\nleft 8\n"),
             ("judge", "[system]\nJ\n"), ("router", "[system]\nS\n[user]\nobs 1\nobs 2\nobs 3\nleft 7\n"),
             ("router", "something else entirely"), ("final", "[system]\nS\n[user]\nobs 1\nwrite the answer\n")]
    records = [{"type": "model_answer", "n": n, "role": role, "request": t} for n, (role, t) in enumerate(texts, 1)]
    journaled = [chain.journal_form(r) for r in records]
    assert ["request_delta" in j for j in journaled] == [False, True, False, True, False, False]
    assert journaled[3]["request_delta"]["base"] == 2  # the last request of its own role, not the judge's
    assert journaled[3]["request_delta"]["text"] == "obs 3\nleft 7\n"
    assert rebuilt(journaled) == records


def test_a_delta_whose_base_was_replaced_or_lost_is_not_rebuilt():
    chain = RequestChain()
    first = {"type": "model_answer", "n": 1, "role": "router", "request": "[user]\nobs 1\nleft 9\n"}
    second = chain.journal_form(first) and chain.journal_form(
        {"type": "model_answer", "n": 2, "role": "router", "request": "[user]\nobs 1\nobs 2\nleft 8\n"})
    assert "request_delta" in second
    # a resumed run that went another way replaced answer 1 with a request of the same length
    replaced = {**first, "request": "[user]\nOBS 1\nleft 9\n"}
    assert "request" not in rebuilt([replaced, second])[1]
    assert "request" not in rebuilt([second])[0]  # its base is gone
    short = {**first, "request": "[user]\n"}
    assert "request" not in rebuilt([short, second])[1]


@pytest.mark.parametrize("a, b", [("", ""), ("abc", "abd"), ("abc", "abc"), ("abc", "ab"), ("x" * 10000, "x" * 10000 + "y"),
                                  ("x" * 9000 + "a" + "x" * 50, "x" * 9000 + "b"), ("é" * 5000, "é" * 4097 + "e")])
def test_common_prefix(a, b):
    expected = next((i for i, (p, q) in enumerate(zip(a, b)) if p != q), min(len(a), len(b)))
    assert common_prefix(a, b) == expected


def _scrubbed_chain(texts: list[str], scrubbers: list) -> list[dict]:
    """Each text journaled by one chain scrubbing as it goes (``scrubbers[i]`` for text i),
    then read back whole."""
    chain = RequestChain()
    records = [{"type": "model_answer", "n": n, "role": "router", "request": t} for n, t in enumerate(texts, 1)]
    return rebuilt([chain.journal_form(r, s) for r, s in zip(records, scrubbers)])


def test_the_chain_scrubs_a_secret_wherever_it_stands_in_a_request():
    from toolloop_cli._secrets import Scrubber

    key = Scrubber(["sk-secret-key"])
    base = "[system]\nS\n" + "obs\n" * 50
    texts = [base + "left 9\n",
             base + "obs sk-secret-key\nleft 8\n",  # in what this request adds
             base + "obs sk-secret-key\nobs\nleft 7\n",  # in what it shares with the last (which held one)
             base + "obs sk-secret-key\nobs\nleft 6\n",
             base + "obs sk-secret-kez\n",  # shares all but the secret's last letter with the one before
             base + "obs sk-secret-key\n"]  # ... and back: the secret straddles where the two part
    got = [a["request"] for a in _scrubbed_chain(texts, [key] * len(texts))]
    assert got == [key.text(t) for t in texts]
    assert "sk-secret-key" not in "".join(got) and got[5].endswith("obs [REDACTED]\n")


def test_a_short_secret_that_becomes_a_word_where_two_requests_part_is_scrubbed():
    from toolloop_cli._secrets import Scrubber

    pin = Scrubber(["ba"])  # shorter than 4 characters: replaced only where it stands as a word
    texts = ["x" * 40 + " bac", "x" * 40 + " ba "]  # no word in the first; the second parts from it right after it
    got = [a["request"] for a in _scrubbed_chain(texts, [pin, pin])]
    assert got == [texts[0], "x" * 40 + " [REDACTED] "]


def test_a_secret_learnt_later_is_scrubbed_from_text_an_earlier_request_shared():
    from toolloop_cli._secrets import Scrubber

    before, after = Scrubber(["sk-secret-key"]), Scrubber(["sk-secret-key", "hunter22"])
    told = "[user]\nthe password is hunter22\n" + "obs\n" * 20  # far before where the requests part
    texts = [told + "left 9\n", told + "obs\nleft 8\n", told + "obs\nobs\nleft 7\n"]
    got = [a["request"] for a in _scrubbed_chain(texts, [before, after, after])]
    assert got[0] == texts[0]  # not a secret yet when it was sent
    assert got[1:] == [after.text(t) for t in texts[1:]] and "hunter22" not in got[1] + got[2]


def test_scrubbing_as_the_chain_goes_is_scrubbing_each_request_whole():
    """Random requests that share most of their start, with secrets (a short one, matched only as
    a whole word) in every place: what the chain journals is each request scrubbed whole."""
    import random

    from toolloop_cli._secrets import Scrubber

    rng = random.Random(27)
    scrubbers = [Scrubber(["ab-ab"]), Scrubber(["ab-ab", "b a"]), Scrubber(["ab-ab", "b a", "ba"])]
    for _ in range(200):
        texts, text, used = [], "", []
        scrubber = scrubbers[0]
        for _ in range(12):
            text = text[:max(0, len(text) - rng.randrange(0, 6))] + "".join(rng.choice("ab- \n") for _ in range(rng.randrange(1, 9)))
            texts.append(text)
            if rng.random() < 0.15:
                scrubber = rng.choice(scrubbers)
            used.append(scrubber)
        assert [a["request"] for a in _scrubbed_chain(texts, used)] == [s.text(t) for s, t in zip(used, texts)]
