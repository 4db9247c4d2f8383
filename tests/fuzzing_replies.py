"""Generators of hostile model replies and provider replies, and the checks every result must pass.

Model replies (the text a model writes: decisions, final answers, judge verdicts) are parsed
into what the loop then hashes, journals, validates and shows in the next prompt: each reply
must come out as a valid value every later step takes, or as a rejection whose reason is text.
A routed run fed such replies (from a replay fixture) must end with an outcome and leave a
journal that reads back. Provider replies (HTTP bodies, content types, charsets, usage shapes,
error bodies) must come out as a reply with text and non-negative integer usage, or as a
``ProviderError`` that says why: never another exception.

Shared by ``tests/test_fuzz.py`` (bounded) and ``scripts/fuzz_campaign.py`` (long).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from toolloop_cli import _json
from toolloop_cli._canonical import sha256_of

# ---------------------------------------------------------------------------------------------
# model replies, written as JSON text (so they can hold what Python data cannot: escapes of lone
# surrogates, duplicate keys, numbers past a double, nesting past any parser's stack)

LONE_SURROGATES = ["\\ud800", "\\udfff", "a\\udc00b", "\\ud83d", "\\ud83d\\ude00"]  # the last is a valid pair


def nested(depth: int, open_: str = "[", close: str = "]", leaf: str = "") -> str:
    return open_ * depth + leaf + close * depth


def _string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


strings = st.one_of(
    st.text(max_size=12).map(_string),
    st.sampled_from(["echo", "typed", "secret", "nope", "call", "final", "abort", "continue", "violation"]).map(_string),
    st.sampled_from(LONE_SURROGATES).map(lambda s: f'"{s}"'),
    st.integers(81, 3000).map(lambda n: _string("long" + "\u00e6" * n)),
)
numbers = st.one_of(
    st.integers(-5, 5).map(str), st.sampled_from(["1e400", "-1e400", "1e-400", "-0", "1.5", "12345678901234567890123",
                                                  "1" * 5000, "NaN", "Infinity", "-Infinity", "0x10", "01"]),
)
deep = st.one_of(
    st.integers(1, 1500).map(nested),
    st.integers(1, 1500).map(lambda d: nested(d, '{"a":', "}", "1")),
)
leaves = st.one_of(st.sampled_from(["null", "true", "false"]), numbers, strings, deep)
fragments = st.recursive(leaves, lambda inner: st.one_of(
    st.lists(inner, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
    st.lists(st.tuples(strings, inner), max_size=3).map(lambda kv: "{" + ", ".join(f"{k}: {v}" for k, v in kv) + "}"),
), max_leaves=6)
objects = st.lists(st.tuples(strings, fragments), max_size=3).map(
    lambda kv: "{" + ", ".join(f"{k}: {v}" for k, v in kv) + "}")


def _object(pairs: list[tuple[str, str]]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}"


def _maybe(key: str, value: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(st.just(None), st.just(None), value).map(lambda v: None if v is None else (_string(key), v))


decision_texts = st.builds(
    lambda *pairs: _object([p for p in pairs if p is not None]),
    st.one_of(st.sampled_from(["call", "call", "final", "abort"]).map(_string), fragments).map(
        lambda v: (_string("action"), v)),
    st.one_of(st.sampled_from(["echo", "typed", "secret", "nope"]).map(_string), strings, fragments).map(
        lambda v: (_string("tool"), v)),
    st.one_of(objects, objects, fragments).map(lambda v: (_string("args"), v)),
    st.one_of(strings, strings, fragments).map(lambda v: (_string("reason"), v)),
    _maybe("extra", fragments),
)
answer_texts = st.one_of(objects, st.builds(lambda v, o: _object([(_string("answer"), v), (_string("outcome"), o)]),
                                            fragments, strings))
verdict_texts = st.builds(
    lambda v, r, x: _object([p for p in ((_string("verdict"), v), (_string("reason"), r), x) if p is not None]),
    st.one_of(st.sampled_from(["continue", "violation"]).map(_string), strings, fragments),
    st.one_of(strings, fragments), _maybe("extra", fragments),
)


def _wrapped(text: str, how: int, cut: int) -> str:
    """The reply around the object: as is, fenced, with text before or after, cut short, with a
    raw lone surrogate or a control character inside (an in-process provider can send those)."""
    if how == 1:
        return f"```json\n{text}\n```"
    if how == 2:
        return "Here is my decision: " + text
    if how == 3:
        return text + " and some more words"
    if how == 4:
        return text[: cut % (len(text) + 1)]
    if how == 5:
        at = cut % (len(text) + 1)
        return text[:at] + "\ud800" + text[at:]
    if how == 6:
        return "\ufeff \n\t" + text + "\x00"
    return text


def replies(texts: st.SearchStrategy) -> st.SearchStrategy:
    return st.builds(_wrapped, texts, st.sampled_from([0, 0, 0, 0, 1, 2, 3, 4, 5, 6]), st.integers(0, 10_000))


model_replies = st.one_of(replies(decision_texts), replies(answer_texts), replies(verdict_texts),
                          st.text(max_size=30), st.sampled_from(["", "null", "[]", "\"final\"", "{", "}"]))

FINAL_SCHEMAS = [None, {"type": "object", "required": ["answer"], "properties": {"answer": {"type": "integer"}}},
                 {"type": "object", "properties": {"answer": {"type": "string", "pattern": "^a"}},
                  "additionalProperties": False}]


def writable(value: Any) -> bytes:
    """What the journal and the next prompt need: JSON bytes of ``value``, as UTF-8."""
    raw = _json.dumps(value)
    raw.decode("utf-8")
    return raw


def check_model_reply(text: str) -> None:
    """A reply parsed as a decision, a final answer (against a few schemas, with and without
    declared outcomes) and a judge's verdict: a usable value or a rejection that is text."""
    from toolloop_cli.contract.schemas import compile_validator
    from toolloop_cli.router.closeout import check_final
    from toolloop_cli.router.decisions import Decision, show_args
    from toolloop_cli.router.decisions import attr as shown_attr
    from toolloop_cli.router.decisions import parse_decision
    from toolloop_cli.router.judge import Verdict, parse_verdict
    from toolloop_cli.router.views import Malformed

    decision = parse_decision(text)
    if isinstance(decision, Malformed):
        writable(decision.why)
    else:
        assert isinstance(decision, Decision) and decision.action in ("call", "final", "abort")
        writable({"action": decision.action, "tool": decision.tool, "args": decision.args, "reason": decision.reason})
        if decision.args is not None:
            sha256_of(decision.args)
            writable(show_args(decision.args) + shown_attr(decision.tool))
    for schema in FINAL_SCHEMAS:
        validator = compile_validator(schema, mask=False) if schema is not None else None
        for outcomes in (None, ("done", "review")):
            answer, errors = check_final(text, validator, outcomes)
            if errors is None:
                writable(answer)
                sha256_of(answer)
            else:
                assert answer is None and errors
                writable(errors)
    verdict = parse_verdict(text)
    if isinstance(verdict, Malformed):
        writable(verdict.why)
    else:
        assert isinstance(verdict, Verdict) and verdict.verdict in ("continue", "violation")
        writable(verdict.reason)


# ---------------------------------------------------------------------------------------------
# a routed run fed hostile replies, end to end (in process, a replay fixture as the model)

routed_scripts = st.tuples(st.lists(replies(decision_texts), min_size=1, max_size=3),
                           st.lists(replies(answer_texts), min_size=1, max_size=2),
                           st.sampled_from([1, 1, 0, 2 ** 31, 2 ** 70]))


def _fixture_line(n: int, role: str, text: str, tokens: int) -> bytes:
    # written the way runs export writes it; a raw lone surrogate cannot be: it is sent escaped
    record = {"type": "model_answer", "n": n, "role": role, "model": "fuzz", "text": text,
              "input_tokens": tokens, "output_tokens": 1}
    return json.dumps(record).encode("ascii")


def check_routed_run(folder: Path, router: list[str], final: list[str], tokens: int = 1) -> None:
    """A routed plan whose model replies are ``router`` texts, a final decision, then ``final``
    texts (each charged ``tokens``): the run ends with an outcome, and what it journaled reads
    back and can be shown."""
    import tempfile

    from fuzzing import BASE_REGISTRY, check_findings
    from toolloop_cli.errors import ConfigError
    from toolloop_cli.engine.run import RunOptions, execute_plan
    from toolloop_cli.plan.admit import admit_plan
    from toolloop_cli.runview import printed_records
    from toolloop_cli.store import Store

    work = Path(tempfile.mkdtemp(dir=folder))
    (work / "reg.yml").write_text(BASE_REGISTRY, encoding="utf-8")
    texts = [("router", t) for t in router] + [("router", '{"action": "final", "reason": "done"}')]
    texts += [("final", t) for t in final]
    (work / "fixture.jsonl").write_bytes(b"\n".join(_fixture_line(n, role, t, tokens) for n, (role, t) in enumerate(texts, 1)))
    profile = "{provider: replay, fixture: fixture.jsonl}"
    (work / "plan.yml").write_text(
        "version: 1\nregistry: reg.yml\nsubagent: w\nmode: routed\ngoal: Fuzz.\nallowed_tools: [echo, typed]\n"
        f"router_profile: {profile}\nfinal_profile: {profile}\n"
        "budget: {max_iterations: 5, max_tokens: 100000, max_tool_calls: 3, timeout_s: 60}\n"
        "final_schema: {type: object, required: [answer]}\n", encoding="utf-8")
    try:
        plan = admit_plan(work / "plan.yml")
    except ConfigError as exc:  # a fixture line that cannot be read (a raw lone surrogate): a finding
        check_findings(exc.problems)
        assert all(p.code == "TL421" for p in exc.problems), exc.problems
        return
    store = Store(work / "state")
    got: list = []
    try:
        result = execute_plan(plan, store, got.append, RunOptions(handle_signals=False))
        summary = result.summary
        assert summary["type"] == "summary" and summary["outcome"] in (
            "final", "max_iterations", "budget_exceeded", "parse_error", "malformed_output", "duplicate_action",
            "provider_error", "aborted"), summary
        writable(got)
        run = store.get_run(summary["run_id"])
        writable(printed_records(store, run))
    finally:
        store.close()


# ---------------------------------------------------------------------------------------------
# provider replies: what an HTTP server sends back (real HTTP on 127.0.0.1, tests/modelserver.py)

usage_values = st.one_of(st.integers(0, 100), st.integers(-5, -1), st.sampled_from([1e30, 2 ** 70, 1.5, "7", None, True, [],
                                                                                       {"n": 1}, float("nan")]))
contents = st.one_of(st.text(max_size=20), st.sampled_from([None, 7, [], [{"type": "text", "text": "hi"}],
                                                            [{"text": 3}], {"text": "x"}]))
error_messages = st.one_of(st.text(max_size=20), st.sampled_from([None, 7, ["a"]]),
                           st.integers(1, 3000).map(lambda d: json.loads(nested(d)) if d < 900 else "deep"))


def _openai_body(content: Any, usage: dict, shape: int) -> Any:
    choice = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
    if shape == 1:
        return {"choices": [], "usage": usage}
    if shape == 2:
        return {"choices": [choice["message"]], "usage": usage}
    if shape == 3:
        return [choice]
    return {"id": "x", "model": "fuzz", "choices": [choice], "usage": usage}


def _anthropic_body(content: Any, usage: dict, shape: int) -> Any:
    blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
    if shape == 1:
        return {"content": {"type": "text", "text": content}, "usage": usage}
    if shape == 2:
        return {"content": blocks, "usage": None}
    return {"id": "x", "model": "fuzz", "content": blocks, "usage": usage}


def _encode(body: Any, charset: str, raw: int) -> bytes:
    if raw == 1:
        return b"[" * 5000 + b"]" * 5000
    if raw == 2:
        return b'{"error": ' + nested(3000, '{"message": ', "}", '"x"').encode() + b"}"
    if raw == 3:
        return b"\xff\xfe{not json"
    text = json.dumps(body, allow_nan=True)
    try:
        return text.encode(charset)
    except (LookupError, UnicodeEncodeError):
        return text.encode("utf-8")


CONTENT_TYPES = ["application/json", "application/json; charset=utf-8", "text/plain; charset=utf-16",
                 "application/json; charset=latin-1", "application/json; charset=nonsense", "text/html", ""]


@st.composite
def provider_replies(draw: Any) -> tuple[str, Any]:
    """(protocol, a modelserver Reply): a body in some shape, charset and content type."""
    from modelserver import Reply

    protocol = draw(st.sampled_from(["openai", "anthropic"]))
    status = draw(st.sampled_from([200, 200, 200, 200, 400, 401, 404, 429, 500, 503]))
    usage_keys = (("prompt_tokens", "completion_tokens") if protocol == "openai" else ("input_tokens", "output_tokens"))
    usage = {k: draw(usage_values) for k in usage_keys if draw(st.booleans()) or True}
    if status >= 400:
        body: Any = {"error": {"message": draw(error_messages), "type": "fuzz"}}
    elif protocol == "openai":
        body = _openai_body(draw(contents), usage, draw(st.sampled_from([0, 0, 0, 1, 2, 3])))
    else:
        body = _anthropic_body(draw(contents), usage, draw(st.sampled_from([0, 0, 0, 1, 2])))
    content_type = draw(st.sampled_from(CONTENT_TYPES))
    charset = content_type.partition("charset=")[2] or "utf-8"
    if draw(st.booleans()):
        charset = draw(st.sampled_from(["utf-8", "utf-16", "latin-1"]))  # declared one way, written another
    raw = draw(st.sampled_from([0, 0, 0, 0, 0, 0, 1, 2, 3]))
    headers = {"content-type": content_type} if content_type else {}
    if draw(st.booleans()):
        headers["retry-after"] = draw(st.sampled_from(["1", "-5", "nan", "inf", "Wed, 21 Oct 2015 07:28:00 GMT", "soon"]))
    return protocol, Reply(status=status, body=_encode(body, charset, raw), headers=headers)


def check_provider_reply(server: Any, protocol: str, reply: Any) -> None:
    """One request to ``server`` answered with ``reply``: a usable reply or a ProviderError."""
    import trio

    from toolloop_cli.providers import ERROR_KINDS, ModelReply, ModelRequest, Profile, ProviderError, make_provider

    base = server.openai_base if protocol == "openai" else server.anthropic_base
    provider = make_provider(Profile(protocol, model="m", base_url=base, api_key_env="FUZZ_KEY", max_output_tokens=100),
                             env={"FUZZ_KEY": "k"})
    request = ModelRequest([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}], "m",
                           max_tokens=100, json_mode=True, role="router")
    with server._lock:  # this case's reply only, whatever an earlier case left
        server._queue.clear()
    server.script(reply)

    async def ask() -> Any:
        try:
            return await provider.complete(request, 10)
        except ProviderError as exc:
            return exc
        finally:
            await provider.aclose()

    got = trio.run(ask)
    if isinstance(got, ProviderError):
        assert got.kind in ERROR_KINDS and isinstance(got.message, str) and got.message
        writable(got.message)
        assert got.retry_after_s is None or 0 <= got.retry_after_s < float("inf")
        return
    assert isinstance(got, ModelReply), got
    writable([got.text, got.model])
    for n in (got.input_tokens, got.output_tokens):
        assert isinstance(n, int) and not isinstance(n, bool) and n >= 0, (got.input_tokens, got.output_tokens)
