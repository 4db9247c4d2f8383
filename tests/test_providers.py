"""Providers against a real HTTP server on 127.0.0.1 (tests/modelserver.py), under trio."""

from __future__ import annotations

import json
import socket
import threading
import traceback
from datetime import datetime, timezone

import pytest
import trio

from modelserver import Reply
from toolloop_cli.providers import ModelReply, ModelRequest, Price, Profile, ProviderError, make_provider, make_providers
from toolloop_cli.providers import parse_retry_after
from toolloop_cli.providers.replay import FixtureError, ReplayAnswers, read_fixture
from toolloop_cli.providers.scripted import ScriptedProvider

KEY = "sk-test-NEVER-SHOWN-4242"
ENV = {"LOOP_KEY": KEY}
MESSAGES = [
    {"role": "system", "content": "You decide."},
    {"role": "user", "content": "Goal: count."},
]


def request(**kw) -> ModelRequest:
    return ModelRequest(**{"messages": MESSAGES, "model": "m-1", "temperature": 0.0, "max_tokens": 64,
                           "json_mode": True, **kw})


def complete(provider, req: ModelRequest | None = None, timeout_s: float = 30) -> ModelReply:
    async def main():
        try:
            return await provider.complete(req or request(), timeout_s)
        finally:
            await provider.aclose()

    return trio.run(main)


def failure(provider, req: ModelRequest | None = None, timeout_s: float = 30) -> ProviderError:
    with pytest.raises(ProviderError) as exc:
        complete(provider, req, timeout_s)
    return exc.value


def openai(server, **kw) -> object:
    return make_provider(Profile("openai", "m-1", base_url=server.openai_base, api_key_env="LOOP_KEY", **kw), env=ENV)


def anthropic(server, **kw) -> object:
    return make_provider(Profile("anthropic", "c-1", base_url=server.anthropic_base, api_key_env="LOOP_KEY", **kw),
                         env=ENV)


def assert_key_only_in(rec, header: str, value: str) -> None:
    assert rec.headers[header] == value
    others = {k: v for k, v in rec.headers.items() if k != header}
    assert KEY not in json.dumps(others) and KEY.encode() not in rec.raw


# ---------------------------------------------------------------------------------------------
# OpenAI Chat Completions


def test_openai_request_and_reply(model_server):
    model_server.script(Reply(text='{"action": "final", "reason": "ok"}', input_tokens=321, output_tokens=12,
                              model="m-1-2025"))
    reply = complete(openai(model_server))
    assert reply == ModelReply('{"action": "final", "reason": "ok"}', 321, 12, "m-1-2025")
    (rec,) = model_server.requests
    assert rec.path == "/v1/chat/completions"
    assert rec.json == {"model": "m-1", "messages": MESSAGES, "stream": False, "temperature": 0.0,
                        "max_tokens": 64, "response_format": {"type": "json_object"}}
    assert_key_only_in(rec, "authorization", f"Bearer {KEY}")


def test_openai_without_key_or_json_mode_sends_neither(model_server):
    model_server.script("{}")
    provider = make_provider(Profile("openai", "m-1", base_url=model_server.openai_base), env=ENV)
    complete(provider, request(json_mode=False, temperature=None, max_tokens=None))
    (rec,) = model_server.requests
    assert "authorization" not in rec.headers
    assert rec.json == {"model": "m-1", "messages": MESSAGES, "stream": False}


def test_openai_429_with_retry_after_seconds_and_date(model_server):
    model_server.script(Reply(text="slow down", status=429, retry_after="7"),
                        Reply(text="slow down", status=429, retry_after="Wed, 01 Jan twenty"),
                        Reply(text="slow down", status=429, retry_after="Fri, 01 Jan 2100 00:00:00 GMT"))
    err = failure(openai(model_server))
    assert (err.kind, err.status, err.retryable, err.retry_after_s) == ("rate_limited", 429, True, 7.0)
    assert "HTTP 429: slow down" in err.message
    err = failure(openai(model_server))
    assert (err.kind, err.retry_after_s) == ("rate_limited", None)  # unreadable header: no hint
    err = failure(openai(model_server))
    assert err.retry_after_s is not None and err.retry_after_s > 365 * 86400


def test_openai_5xx_is_retryable_and_4xx_is_not(model_server):
    model_server.script(Reply(text="upstream broke", status=500), Reply(text="overloaded", status=503, retry_after="2"),
                        Reply(text="model not found", status=404))
    err = failure(openai(model_server))
    assert (err.kind, err.status, err.retryable, err.retry_after_s) == ("server", 500, True, None)
    err = failure(openai(model_server))
    assert (err.kind, err.status, err.retryable, err.retry_after_s) == ("server", 503, True, 2.0)
    err = failure(openai(model_server))
    assert (err.kind, err.status, err.retryable) == ("client", 404, False)
    assert err.message.endswith("answered HTTP 404: model not found")


def test_connection_refused_is_a_retryable_connection_error():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    provider = make_provider(Profile("openai", "m", base_url=f"http://127.0.0.1:{port}/v1"), env={})
    err = failure(provider)
    assert (err.kind, err.retryable, err.status) == ("connection", True, None)
    assert err.message == f"the server http://127.0.0.1:{port} refused the connection"


def test_no_reply_within_the_timeout_is_a_connection_error(model_server):
    hold = threading.Event()
    model_server.script(Reply(hold=hold))
    err = failure(openai(model_server), timeout_s=0.2)
    hold.set()
    assert (err.kind, err.retryable) == ("connection", True)
    assert err.message == f"the server {model_server.url} sent no reply within 0.2 s"


@pytest.mark.parametrize("body, words", [
    (b"<html>gateway</html>", "not JSON"),
    ({"choices": []}, "without choices[0].message"),
    ({"choices": [{"message": {"content": None}, "finish_reason": "tool_calls"}]}, "no text (finish_reason: tool_calls)"),
    ({"choices": [{"message": {"content": "{}"}}], "usage": "lots"}, "sent 'usage' as lots, not an object"),
    ([1, 2], "not an object"),
])
def test_openai_malformed_bodies_are_bad_replies(model_server, body, words):
    model_server.script(Reply(body=body))
    err = failure(openai(model_server))
    assert (err.kind, err.retryable) == ("bad_reply", False)
    assert words in err.message


def test_openai_content_parts_are_joined(model_server):
    body = {"model": "m", "choices": [{"message": {"content": [{"type": "text", "text": "{\"a\""},
                                                               {"type": "text", "text": ": 1}"}]}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 4}}
    model_server.script(Reply(body=body))
    assert complete(openai(model_server)) == ModelReply('{"a": 1}', 3, 4, "m")


# ---------------------------------------------------------------------------------------------
# Anthropic Messages


def test_anthropic_request_and_reply(model_server):
    body = {"model": "c-1-latest", "content": [{"type": "text", "text": "{\"verdict\": "},
                                                {"type": "tool_use", "id": "x"},
                                                {"type": "text", "text": "\"continue\"}"}],
            "usage": {"input_tokens": 100, "output_tokens": 9, "cache_read_input_tokens": 20}}
    model_server.script(Reply(body=body))
    messages = MESSAGES + [{"role": "assistant", "content": "{}"}, {"role": "user", "content": "again"},
                           {"role": "user", "content": "and again"}]
    reply = complete(anthropic(model_server), request(messages=messages, model="c-1"))
    assert reply == ModelReply('{"verdict": "continue"}', 120, 9, "c-1-latest")
    (rec,) = model_server.requests
    assert rec.path == "/v1/messages"
    assert rec.headers["anthropic-version"] == "2023-06-01"
    assert rec.json == {"model": "c-1", "max_tokens": 64, "temperature": 0.0, "system": "You decide.",
                        "messages": [{"role": "user", "content": "Goal: count."},
                                     {"role": "assistant", "content": "{}"},
                                     {"role": "user", "content": "again\n\nand again"}]}
    assert_key_only_in(rec, "x-api-key", KEY)


def test_anthropic_errors_and_usage(model_server):
    model_server.script(Reply(text="rate limited", status=429, retry_after="3"), Reply(text="overloaded", status=529),
                        Reply(body={"content": [{"type": "text", "text": "{}"}]}),
                        Reply(body={"content": [], "stop_reason": "max_tokens", "usage": {"input_tokens": 1, "output_tokens": 1}}),
                        Reply(body={"content": [], "stop_reason": "refusal", "usage": {"input_tokens": 1, "output_tokens": 1}}))
    err = failure(anthropic(model_server))
    assert (err.kind, err.retry_after_s, err.retryable) == ("rate_limited", 3.0, True)
    assert "rate limited" in err.message
    err = failure(anthropic(model_server))
    assert (err.kind, err.status, err.retryable) == ("server", 529, True)
    # no usage at all (some local servers): 0 tokens, and the reply says it reported none
    assert complete(anthropic(model_server)) == ModelReply("{}", 0, 0, "m-1", usage_reported=False)
    err = failure(anthropic(model_server))
    assert err.kind == "bad_reply"
    assert "no text block (cut off at the output token limit (max_tokens) before it ended)" in err.message
    err = failure(anthropic(model_server))
    assert err.kind == "bad_reply" and "no text block (stop_reason: refusal)" in err.message


def test_anthropic_needs_max_tokens_and_asks_nothing_without_it(model_server):
    err = failure(anthropic(model_server), request(max_tokens=None))
    assert (err.kind, err.retryable) == ("client", False) and "max_output_tokens" in err.message
    assert model_server.requests == []


# ---------------------------------------------------------------------------------------------
# The key: in the header, nowhere else


def test_the_key_is_read_at_request_time_and_a_missing_one_sends_nothing(model_server):
    env: dict[str, str] = {}
    provider = make_provider(Profile("openai", "m", base_url=model_server.openai_base, api_key_env="LOOP_KEY"), env=env)
    err = failure(provider)
    assert err.kind == "client" and "LOOP_KEY" in err.message and "not set" in err.message
    assert model_server.requests == []
    env["LOOP_KEY"] = KEY  # set after the provider was made: read when the request is made
    model_server.script("{}")
    complete(provider)
    assert model_server.requests[0].headers["authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize("make", [openai, anthropic])
def test_the_key_never_appears_in_errors_reprs_or_tracebacks(model_server, make):
    model_server.script(Reply(text=f"Incorrect API key provided: {KEY}. Check it.", status=401))
    provider = make(model_server)
    err = failure(provider)
    shown = [str(err), repr(err), err.message, repr(provider), str(provider),
             "".join(traceback.format_exception(err))]
    assert all(KEY not in s for s in shown), shown
    assert "[REDACTED]" in err.message and err.kind == "client"
    assert err.__cause__ is None and (err.__context__ is None or err.__suppress_context__)


def test_messages_name_the_server_without_user_info_or_path():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    provider = make_provider(Profile("openai", "m", base_url=f"http://user:pa55@127.0.0.1:{port}/secret/v1"), env={})
    err = failure(provider)
    assert "pa55" not in err.message and "secret" not in err.message and "user" not in repr(provider)


def test_a_request_in_flight_does_not_block_the_trio_loop(model_server):
    arrived, hold = threading.Event(), threading.Event()

    def handler(rec):
        arrived.set()
        return Reply(text='{"ok": true}', hold=hold)

    model_server.script(Reply(handler=handler))
    provider = openai(model_server)
    got = {}

    async def main():
        async with trio.open_nursery() as nursery:
            async def ask():
                got["reply"] = await provider.complete(request(), 30)

            nursery.start_soon(ask)
            # the loop keeps running while the request waits on the server
            await trio.to_thread.run_sync(arrived.wait)
            got["while_waiting"] = "reply" not in got
            hold.set()
        await provider.aclose()

    trio.run(main)
    assert got["while_waiting"] and got["reply"].text == '{"ok": true}'


# ---------------------------------------------------------------------------------------------
# Retry-After, errors, prices


def test_parse_retry_after():
    now = datetime(2030, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
    assert parse_retry_after("12") == 12.0
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after("-3") == 0.0
    assert parse_retry_after("Tue, 01 Jan 2030 12:00:30 GMT", now=now) == 30.0
    assert parse_retry_after("Tue, 01 Jan 2030 11:00:00 GMT", now=now) == 0.0
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None and parse_retry_after("nan") is None


def test_provider_error_kinds_and_retryability():
    assert [ProviderError(k, "x").retryable for k in ("connection", "rate_limited", "server", "client", "bad_reply")] \
        == [True, True, True, False, False]
    with pytest.raises(ValueError):
        ProviderError("oops", "x")


def test_price_cost_and_unknown_provider():
    assert Price(0.40, 1.60).cost(1_000_000, 500_000) == pytest.approx(1.20)
    with pytest.raises(ValueError, match="unknown provider 'openia'"):
        make_provider(Profile("openia", "m"), env={})


# ---------------------------------------------------------------------------------------------
# Replay and scripted


def fixture(tmp_path, *records, name="answers.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def answer(n, role, text, tin=100, tout=10):
    return {"type": "model_answer", "run_id": "r1", "n": n, "role": role, "model": "m-rec",
            "request_sha256": "0" * 64, "text": text, "input_tokens": tin, "output_tokens": tout}


def test_replay_serves_every_profile_from_one_fixture_in_recorded_order(tmp_path):
    fixture(tmp_path, {"type": "decision", "iteration": 1}, answer(1, "router", "a", 11, 1),
            answer(2, "judge", "b", 22, 2), answer(3, "final", "c", 33, 3), {"type": "summary"})
    profiles = {"router": Profile("replay", fixture="answers.jsonl"), "final": Profile("replay", fixture="answers.jsonl"),
                "judge": Profile("replay", fixture="answers.jsonl")}
    p = make_providers(profiles, env={}, plan_dir=tmp_path)

    async def main():
        out = [await p["router"].complete(request(role="router"), 1), await p["judge"].complete(request(role="judge"), 1),
               await p["final"].complete(request(role="final"), 1)]
        with pytest.raises(ProviderError) as exc:
            await p["router"].complete(request(role="router"), 1)
        return out, exc.value

    out, err = trio.run(main)
    assert out == [ModelReply("a", 11, 1, "m-rec"), ModelReply("b", 22, 2, "m-rec"), ModelReply("c", 33, 3, "m-rec")]
    assert err.kind == "client" and "no answer left (3 recorded)" in err.message


def test_replay_reports_a_run_that_diverges_from_the_recording(tmp_path):
    answers = ReplayAnswers(read_fixture(fixture(tmp_path, answer(1, "final", "x"))), "rec.jsonl")
    provider = make_provider(Profile("replay"), env={}, replay_answers=answers)
    err = failure(provider, request(role="router"))
    assert "rec.jsonl: recorded answer 1 is a 'final' answer but the run asked for 'router'" in err.message
    assert answers.position == 0


@pytest.mark.parametrize("lines, line, words", [
    (["{not json"], 1, "line is not JSON"),
    (["[1]"], 1, "not a JSON object"),
    ([json.dumps(answer(1, "router", "a")), json.dumps({**answer(2, "router", "b"), "input_tokens": "9"})], 2,
     "'input_tokens' is missing or not an integer"),
    ([json.dumps({**answer(1, "boss", "a")})], 1, "'role' must be one of"),
    ([json.dumps({"type": "receipt"})], 0, "holds no model_answer records"),
])
def test_fixture_errors_name_the_line(tmp_path, lines, line, words):
    path = tmp_path / "f.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(FixtureError) as exc:
        read_fixture(path)
    assert exc.value.line == line and words in exc.value.message


def test_missing_fixture():
    with pytest.raises(FixtureError, match="fixture file not found"):
        read_fixture("/nonexistent/answers.jsonl")


def test_scripted_provider_keeps_requests_and_raises_scripted_errors():
    provider = ScriptedProvider(["one", ProviderError("server", "boom"), lambda r: ModelReply(r.model, 1, 2, "x")])

    async def main():
        first = await provider.complete(request(), 1)
        with pytest.raises(ProviderError, match="boom"):
            await provider.complete(request(), 1)
        third = await provider.complete(request(model="m-9"), 1)
        with pytest.raises(ProviderError, match="no reply left"):
            await provider.complete(request(), 1)
        return first, third

    first, third = trio.run(main)
    assert first == ModelReply("one", 10, 5, "m-1") and third == ModelReply("m-9", 1, 2, "x")
    assert len(provider.requests) == 4


# ---------------------------------------------------------------------------------------------
# Replies that are not what they say: usage that is not a count, bodies nesting deeply or in a
# charset they are not written in, replies cut off at the output token limit


def openai_reply(usage: object = None, *, text: str = "{}", finish_reason: str = "stop") -> dict:
    body: dict = {"model": "m-1", "choices": [{"message": {"content": text}, "finish_reason": finish_reason}]}
    if usage is not None:
        body["usage"] = usage
    return body


def anthropic_reply(usage: object = None, *, text: str = "{}", stop_reason: str = "end_turn") -> dict:
    body: dict = {"model": "c-1", "content": [{"type": "text", "text": text}], "stop_reason": stop_reason}
    if usage is not None:
        body["usage"] = usage
    return body


@pytest.mark.parametrize("make, body, name, shown", [
    (openai, openai_reply({"prompt_tokens": -5, "completion_tokens": 1}), "prompt_tokens", "-5"),
    (openai, openai_reply({"prompt_tokens": 1, "completion_tokens": 1e30}), "completion_tokens", "1e+30"),
    (openai, openai_reply({"prompt_tokens": 1.5, "completion_tokens": 1}), "prompt_tokens", "1.5"),
    (openai, openai_reply({"prompt_tokens": "12", "completion_tokens": 1}), "prompt_tokens", "12"),
    (openai, openai_reply({"prompt_tokens": True, "completion_tokens": 1}), "prompt_tokens", "true"),
    (anthropic, anthropic_reply({"input_tokens": 10, "output_tokens": -1}), "output_tokens", "-1"),
    (anthropic, anthropic_reply({"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": -100}),
     "cache_read_input_tokens", "-100"),
])
def test_usage_that_is_not_a_count_of_tokens_refuses_the_reply(model_server, make, body, name, shown):
    """Negative, fractional, textual or boolean usage would be a credit against the budgets."""
    model_server.script(Reply(body=body))
    err = failure(make(model_server))
    assert (err.kind, err.retryable) == ("bad_reply", False)
    assert err.message == (f"the server {model_server.url} reported usage.{name} = {shown}, which is not a count of"
                           " tokens (a non-negative integer); the reply is refused")


@pytest.mark.parametrize("make, body", [
    (openai, openai_reply()), (openai, openai_reply({"total_tokens": 9})),
    (anthropic, anthropic_reply()), (anthropic, anthropic_reply({"output_tokens": 3})),
])
def test_a_reply_without_usage_counts_nothing_and_says_so(model_server, make, body):
    model_server.script(Reply(body=body))
    reply = complete(make(model_server))
    assert reply.usage_reported is False and reply.text == "{}"


DEEP = b'{"error": ' * 5000 + b'"x"' + b"}" * 5000


@pytest.mark.parametrize("make", [openai, anthropic])
@pytest.mark.parametrize("status, kind", [(500, "server"), (400, "client"), (200, "bad_reply")])
def test_a_body_nesting_deeply_is_a_provider_error_quoting_its_start(model_server, make, status, kind):
    model_server.script(Reply(status=status, body=DEEP))
    err = failure(make(model_server))
    assert (err.kind, err.status) == (kind, status)
    said = "answered HTTP 200 with a body that is not JSON: '" if status == 200 else f"answered HTTP {status}: "
    assert err.message.startswith(f'the server {model_server.url} {said}{{"error": {{"error": ')
    assert len(err.message) < 300


UTF8_OK = json.dumps(openai_reply({"prompt_tokens": 3, "completion_tokens": 4}, text="hi")).encode()


@pytest.mark.parametrize("ctype", ["text/plain; charset=utf-16", "application/json; charset=x-no-such-charset"])
def test_a_body_declared_in_a_charset_it_is_not_written_in(model_server, ctype):
    """JSON is UTF-8: a body that is, whatever its header says, is read; an error body is quoted."""
    model_server.script(Reply(body=UTF8_OK, content_type=ctype),
                        Reply(status=400, body=b'{"error": {"message": "model m-1 not found"}}', content_type=ctype),
                        Reply(status=503, body=b"\xff\xfe\xd8overloaded\x00!", content_type=ctype),
                        Reply(status=200, body=b"\xff\xfe\xd8\x00not json at all", content_type=ctype))
    assert complete(openai(model_server)) == ModelReply("hi", 3, 4, "m-1")
    err = failure(openai(model_server))
    assert (err.kind, err.message) == ("client", f"the server {model_server.url} answered HTTP 400: model m-1 not found")
    err = failure(openai(model_server))
    assert (err.kind, err.retryable, err.status) == ("server", True, 503)
    assert err.message.startswith(f"the server {model_server.url} answered HTTP 503: ")
    err = failure(openai(model_server))
    assert err.kind == "bad_reply" and "with a body that is not JSON" in err.message


def test_a_body_written_in_the_charset_it_declares_is_read(model_server):
    model_server.script(Reply(body=UTF8_OK.decode().encode("utf-16"), content_type="application/json; charset=utf-16"))
    assert complete(openai(model_server)) == ModelReply("hi", 3, 4, "m-1")


@pytest.mark.parametrize("make, body", [
    (openai, openai_reply({"prompt_tokens": 3, "completion_tokens": 64}, text='{"action": "fi', finish_reason="length")),
    (anthropic, anthropic_reply({"input_tokens": 3, "output_tokens": 64}, text='{"action": "fi', stop_reason="max_tokens")),
])
def test_a_reply_cut_off_at_the_output_token_limit_says_so(model_server, make, body):
    model_server.script(Reply(body=body), Reply(body={**body, "choices": [{"message": {"content": None},
                                                                          "finish_reason": "length"}]}
                                                if make is openai else {**body, "content": []}))
    reply = complete(make(model_server))
    assert reply.cut is True and reply.text == '{"action": "fi'
    err = failure(make(model_server))
    assert err.kind == "bad_reply" and "(cut off at the output token limit (max_tokens) before it ended)" in err.message


# ---------------------------------------------------------------------------------------------
# Property-based: whatever a server sends back, a provider gives a reply with counts of tokens
# or a ProviderError whose message is one bounded line; never another exception

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_json_leaf = st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats() | st.text(max_size=20)
_json = st.recursive(_json_leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                             max_size=3), max_leaves=8)
_counts = _json | st.integers(-5, 5)
_usage = st.none() | _json | st.fixed_dictionaries({}, optional={
    "prompt_tokens": _counts, "completion_tokens": _counts, "input_tokens": _counts, "output_tokens": _counts,
    "cache_read_input_tokens": _counts})
_shaped = st.fixed_dictionaries({}, optional={
    "choices": st.lists(st.fixed_dictionaries({}, optional={
        "message": st.fixed_dictionaries({}, optional={"content": _json | st.text(max_size=30)}) | _json,
        "finish_reason": _json}), max_size=2) | _json,
    "content": st.lists(st.fixed_dictionaries({"type": st.sampled_from(["text", "tool_use"])},
                                              optional={"text": _json | st.text(max_size=30)}), max_size=2) | _json,
    "usage": _usage, "model": _json, "stop_reason": _json, "error": _json | st.fixed_dictionaries({"message": _json})})


def _deep(n: int) -> bytes:
    return b'{"error": ' * n + b"1" + b"}" * n


_body = st.one_of(
    _shaped.map(lambda d: json.dumps(d).encode()),
    _shaped.map(lambda d: json.dumps(d).encode("utf-16")),
    st.binary(max_size=64),
    st.integers(1, 20_000).map(_deep),
    _json.map(lambda v: json.dumps(v).encode()),
)
_reply = st.builds(
    lambda status, body, ctype, retry_after: Reply(status=status, body=body, content_type=ctype,
                                                   retry_after=retry_after),
    st.sampled_from([200, 201, 400, 401, 404, 429, 500, 503, 529]), _body,
    st.sampled_from(["application/json", "text/plain; charset=utf-16", "application/json; charset=latin-1",
                     "application/json; charset=no-such", "text/html", "application/json; charset=utf-32"]),
    st.none() | st.sampled_from(["1", "-1", "nan", "soon", "Tue, 01 Jan 2030 12:00:30 GMT"]))


@pytest.fixture(scope="module")
def shared_server():
    from modelserver import ModelServer

    server = ModelServer().start()
    yield server
    server.stop()


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(reply=_reply, protocol=st.sampled_from(["openai", "anthropic"]))
def test_any_reply_is_a_counted_reply_or_a_provider_error(shared_server, reply, protocol):
    shared_server.script(reply)
    make = openai if protocol == "openai" else anthropic
    try:
        got = complete(make(shared_server))
    except ProviderError as exc:
        assert exc.kind in ("connection", "rate_limited", "server", "client", "bad_reply")
        assert "\n" not in exc.message and len(exc.message) < 400
        assert exc.retry_after_s is None or exc.retry_after_s >= 0
        return
    assert isinstance(got.text, str)
    for n in (got.input_tokens, got.output_tokens):
        assert type(n) is int and n >= 0
