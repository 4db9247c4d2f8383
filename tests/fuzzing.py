"""Generators of hostile and careless registries, plans and lane streams, and the checks every
result must pass: findings (placed, clipped, escaped) or an admitted plan, never an exception.

Shared by ``tests/test_fuzz.py`` (a bounded number of examples, part of the suite) and
``scripts/fuzz_campaign.py`` (a long campaign for occasional use).

Documents are written as YAML text by ``to_yaml`` so that they can hold what a generator of
Python data cannot: explicit tags (``!!int false``), NaN, integers of thousands of digits.
Callables are drawn from a fixed list, so that no generated registry imports a module outside
the test App.
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

try:  # the CEL library raises the recursion limit with its first environment: let that happen now
    import celpy

    celpy.Environment()
except ImportError:  # approvals are an optional extra
    pass

from conftest import APP
from toolloop_cli._text import EXCERPT
from toolloop_cli.contract.problems import CODES, Problem
from toolloop_cli.contract.registry import load_registry
from toolloop_cli.errors import ConfigError
from toolloop_cli.plan.admit import admit_plan, load_plan
from toolloop_cli.plan.lanes import RejectedLane
from toolloop_cli.render.lint import format_text

# ---------------------------------------------------------------------------------------------
# YAML text with what plain data cannot say


@dataclass(frozen=True)
class Tagged:
    """A scalar written with an explicit tag: ``!!int false``."""

    tag: str
    text: str


@dataclass(frozen=True)
class Raw:
    """YAML written as is (NaN, an integer of 5,000 digits, an alias, a broken fragment)."""

    text: str


def to_yaml(value: Any) -> str:
    """Flow-style YAML of ``value``; text is written as JSON strings, which YAML reads alike."""
    if isinstance(value, Tagged):
        return f"{value.tag} {_yaml_str(value.text)}" if value.text else value.tag
    if isinstance(value, Raw):
        return value.text
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return ".nan" if value != value else ".inf" if value == float("inf") else "-.inf" if value == float("-inf") else repr(value)
    if isinstance(value, str):
        return _yaml_str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_yaml_str(str(k))}: {to_yaml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(to_yaml(v) for v in value) + "]"
    raise TypeError(type(value))


_NOT_PRINTABLE = re.compile("[\x7f-\x9f\u2028\u2029\ud800-\udfff\ufeff\ufffe\uffff]")


def _yaml_str(text: str) -> str:
    """A double-quoted YAML scalar: JSON's escapes for C0 controls, YAML's ``\\u`` for the
    characters YAML does not take raw or reads as line breaks; everything else as is (YAML has no surrogate pairs)."""
    return _NOT_PRINTABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(text, ensure_ascii=False))


# ---------------------------------------------------------------------------------------------
# values

#: long values carry a run of one letter; no message may quote more than an excerpt of them
LONG_CHAR = "\u00e6"
long_text = st.integers(EXCERPT + 1, 3000).map(lambda n: "long" + LONG_CHAR * n)
control_text = st.text(alphabet=st.sampled_from("ab\x1b[31m\n\r\t\x07\x00\x7f\x9b\u202e\u2028 "), min_size=1, max_size=12)
big_int = st.sampled_from([2 ** 63, 2 ** 64, 10 ** 30, 10 ** 400])
wide_int = st.one_of(
    st.integers(min_value=-(2 ** 200), max_value=2 ** 200),
    st.sampled_from([2 ** 63, 2 ** 64, -(2 ** 63) - 1, 10 ** 30, -(10 ** 30), 10 ** 400]),
)
words = st.sampled_from(["a", "echo", "typed", "w", "id", "x", "password", "api_token", "é", "*", "~", "0"])
hostile_text = st.one_of(words, words, control_text, long_text)

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), wide_int,
    st.floats(allow_nan=True, allow_infinity=True), words, st.text(max_size=8), control_text, long_text,
    st.builds(Tagged, st.sampled_from(["!!int", "!!float", "!!bool", "!!null", "!!str", "!!timestamp",
                                       "!!binary", "!!python/object:os.system", "!foo", "!!map", "!!seq"]),
              st.sampled_from(["", "false", "x", "maybe", "1", "1.5", "0x1F", "yes", ".nan", "2024-01-01", "~"])),
    st.sampled_from([Raw("1" * 5000), Raw("-" + "9" * 25), Raw(".inf"), Raw("0o17"), Raw("{a: 1, a: 2}"),
                     Raw("{<<: {a: 1}, b: 2}")]),
)
#: any value at all, of any type and shape
junk = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.one_of(words, st.text(max_size=6), control_text), inner, max_size=3)),
    max_leaves=8)
#: fragments that break the whole document (syntax errors, alias loops): kept rare, or nothing
#: past the parser would ever be reached
breakers = st.sampled_from([Raw("*undefined"), Raw("[1, 2"), Raw("'unclosed"), Raw("&x [*x]"), Raw("<<: {a: 1}"),
                            Raw("!!python/object:os.system x"), Raw("- a\n b"), Raw("&x [1, 2]")])


def one_in(n: int, rare: st.SearchStrategy, usual: st.SearchStrategy) -> st.SearchStrategy:
    """``rare`` about once in ``n`` draws. (Hypothesis leans to the ends of a range, so the rare
    choice sits in its middle.)"""
    return st.sampled_from(range(n)).flatmap(lambda i: rare if i == n // 2 else usual)


bad = one_in(25, breakers, junk)


def maybe(good: st.SearchStrategy, n: int = 12) -> st.SearchStrategy:
    """Mostly the right kind of value (so that later checks are reached), one in ``n`` anything
    at all."""
    return one_in(n, bad, good)


def nested(depth: int, leaf: Any = 1) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


def some(required: dict, optional: dict, extra: dict | None = None) -> st.SearchStrategy:
    """A mapping with ``required`` keys, a random subset of ``optional`` ones, and now and then
    one of ``extra`` (keys that are always a mistake)."""
    base = st.fixed_dictionaries(required, optional=optional)
    if not extra:
        return base
    wrong = st.fixed_dictionaries(
        {k: st.one_of(v, extra[k]) if k in extra else v for k, v in required.items()},
        optional={**optional, **{k: v for k, v in extra.items() if k not in required}})
    return one_in(10, wrong, base)


# ---------------------------------------------------------------------------------------------
# schemas

type_names = st.sampled_from(["object", "array", "string", "integer", "number", "boolean", "null"])
schemas = st.recursive(
    st.one_of(st.just({}), st.booleans(), st.fixed_dictionaries({"type": type_names})),
    lambda inner: some({}, {
        "type": maybe(st.one_of(type_names, st.lists(type_names, max_size=3))),
        "properties": maybe(st.dictionaries(hostile_text, inner, max_size=3)),
        "items": inner,
        "required": maybe(st.lists(words, max_size=3)),
        "additionalProperties": st.one_of(st.booleans(), inner),
        "$defs": st.dictionaries(words, inner, max_size=2),
        "pattern": maybe(st.sampled_from(["^a", "x*", "\\d+"])),
        "patternProperties": st.dictionaries(st.sampled_from(["^a", "x*"]), inner, max_size=2),
        "enum": st.lists(junk, min_size=1, max_size=3),
        "minimum": maybe(wide_int),
        "maximum": maybe(wide_int),
        "writeOnly": maybe(st.booleans()),
        "anyOf": st.lists(inner, min_size=1, max_size=2),
        "prefixItems": st.lists(inner, max_size=2),
    }, {
        "type": st.one_of(junk, st.just([["object"]]), st.just("strng")),
        "$schema": st.one_of(st.just("https://json-schema.org/draft/2020-12/schema"),
                             st.just("http://json-schema.org/draft-07/schema#"), st.just("nonsense"), junk),
        "$ref": st.one_of(st.sampled_from(["#", "#/properties/a", "#/$defs/x", "#nope", "http://example.com/s",
                                           "file:///etc/passwd"]), junk),
        "pattern": st.one_of(st.sampled_from(["(", "\\p{L}", "(?<=a)b", "[z-a]"]), long_text, junk),
        "patternProperties": st.dictionaries(st.sampled_from(["(", "[z-a]"]), inner, max_size=2),
        "const": junk,
        "allOf": junk,
    }),
    max_leaves=10,
)

# ---------------------------------------------------------------------------------------------
# registries

callables = st.sampled_from([
    "testapp.tools:echo", "testapp.tools:echo", "testapp.tools:echo", "testapp.tools:nope", "testapp._private:x",
    "zz_missing_pkg.mod:f", "no-colon", "a:b:c", "testapp.tools:echo.__call__", "testapp.tools:big", "testapp:tools",
])
pointers = st.one_of(st.sampled_from(["/a", "/*", "/password", "/a/~2", "a", "", "/properties"]), control_text, long_text)
retries = some({}, {
    "max_attempts": maybe(st.integers(1, 5)),
    "backoff_s": maybe(st.floats(0, 5)),
    "max_backoff_s": maybe(st.floats(0, 5)),
    "on": maybe(st.lists(st.sampled_from(["timeout", "error"]), max_size=2)),
}, {"max_attempts": wide_int, "on": st.lists(junk, max_size=2)})
envelopes = some({"version": maybe(st.just(1)), "role": maybe(words),
                  "graph": maybe(some({"status_field": maybe(words), "continue_statuses": maybe(st.lists(words, max_size=2)),
                                       "stop_statuses": maybe(st.lists(words, max_size=2))}, {}))},
                 {"handoff_fields": maybe(st.lists(words, max_size=2))})
tools = some(
    {"callable": maybe(callables), "description": maybe(hostile_text),
     "input_schema": maybe(schemas), "output_schema": maybe(schemas)},
    {
        "timeout_s": maybe(st.floats(0.1, 10) | big_int),
        "retry": maybe(retries),
        "isolation": maybe(st.sampled_from(["thread", "process"])),
        "effect": maybe(st.sampled_from(["read", "write", "destructive"])),
        "idempotent": maybe(st.booleans()),
        "max_calls": maybe(st.integers(0, 5) | big_int),
        "cacheable": maybe(st.booleans()),
        "redact": maybe(st.lists(pointers, max_size=3)),
        "approval": maybe(st.fixed_dictionaries({"when": maybe(st.sampled_from(["args.a > 1", "((", "args."]))})),
        "dispatch": maybe(st.lists(words, max_size=2)),
        "concurrency": maybe(some({}, {"max_in_flight": maybe(st.integers(1, 3) | big_int),
                                       "per_second": maybe(st.floats(0.1, 5))})),
    },
    {"control_envelope": maybe(envelopes), "callabel": junk, "effect": st.just("reed"),
     "max_calls": wide_int, "timeout_s": wide_int},
)
tool_ids = st.one_of(words, words, control_text, long_text, st.text(max_size=6))
subagents = some(
    {"tools": maybe(st.dictionaries(tool_ids, maybe(tools), min_size=1, max_size=3)),
     "runner_defaults": maybe(some({"tool_timeout_s": maybe(st.floats(0.1, 10) | big_int)}, {
         "allowed_tools": maybe(st.lists(tool_ids, max_size=3)),
         "max_calls": maybe(st.integers(0, 10) | big_int)}))},
    {}, {"runner_defaults": junk},
)
registries = some(
    {"version": maybe(st.just(1)), "app_root": maybe(st.just(str(APP))),
     "subagents": maybe(st.dictionaries(st.one_of(words, control_text), maybe(subagents), min_size=1, max_size=2))},
    {},
    {"evidence": maybe(callables), "unknown_key": junk, "app_root": st.one_of(long_text, control_text, junk)},
)


# ---------------------------------------------------------------------------------------------
# plans and lanes (against BASE_REGISTRY)

BASE_REGISTRY = f"""
version: 1
app_root: {json.dumps(str(APP))}
subagents:
  w:
    runner_defaults: {{tool_timeout_s: 5, max_calls: 40}}
    tools:
      echo:
        callable: testapp.tools:echo
        description: Returns its arguments.
        input_schema: {{}}
        output_schema: {{}}
      typed:
        callable: testapp.tools:echo
        description: Typed arguments.
        max_calls: 6
        input_schema: {{type: object, additionalProperties: false, required: [n],
                        properties: {{n: {{type: integer, maximum: 100000000000000000000000}}, s: {{type: string}}}}}}
        output_schema: {{}}
      secret:
        callable: testapp.tools:secret_echo
        description: Takes a password.
        effect: write
        redact: [/password]
        input_schema: {{type: object, properties: {{user: {{type: string}}, password: {{type: string}}}}}}
        output_schema: {{}}
"""

arguments = st.one_of(
    st.dictionaries(st.sampled_from(["n", "s", "user", "password", "x"]),
                    maybe(st.integers(-3, 3) | wide_int | hostile_text), max_size=3),
    st.dictionaries(st.sampled_from(["n", "s", "user", "password", "x"]),
                    maybe(st.integers(-3, 3) | wide_int | hostile_text), max_size=3),
    st.builds(lambda d: {"x": nested(d)}, st.integers(80, 120)),
)
calls = some(
    {"tool": maybe(st.sampled_from(["echo", "typed", "secret", "nope"]) | control_text | long_text)},
    {"call_key": maybe(st.sampled_from(["a", "b", "a"]) | control_text | long_text), "args": maybe(arguments)},
)
lanes = some(
    {"item_key": maybe(st.sampled_from(["k1", "k2", "k1"]) | control_text | long_text),
     "calls": maybe(st.lists(maybe(calls), min_size=1, max_size=3))},
    {"payload": maybe(st.dictionaries(st.sampled_from(["n", "s", "x"]), maybe(wide_int | hostile_text), max_size=2)
                      | st.builds(lambda d: {"x": nested(d)}, st.integers(80, 120)))},
)
plan_head = {"version": maybe(st.just(1)), "registry": maybe(st.just("reg.yml")), "subagent": maybe(st.just("w"))}
plan_mistakes = {
    "registry": st.sampled_from(["missing.yml", "not_a_registry.txt", "."]) | control_text | long_text,
    "subagent": hostile_text,
    "mode": junk,
    "max_concurrency": wide_int,
    "calls": maybe(st.lists(maybe(calls), max_size=3)),
    "goal": maybe(hostile_text),
    "unknown": junk,
}
plans = st.one_of(
    some({**plan_head, "mode": st.just("sequential"), "calls": maybe(st.lists(maybe(calls), max_size=4))}, {},
         plan_mistakes),
    some({**plan_head, "mode": st.just("parallel"), "lanes": maybe(st.lists(maybe(lanes), max_size=3))},
         {"max_concurrency": maybe(st.integers(1, 4) | big_int)}, plan_mistakes),
    some({**plan_head, "mode": st.just("routed"), "goal": maybe(hostile_text),
          "budget": maybe(some({"max_iterations": maybe(st.integers(1, 3) | big_int), "max_tokens": maybe(st.just(100)),
                                "max_tool_calls": maybe(st.just(1)), "timeout_s": maybe(st.just(5))}, {})),
          "router_profile": maybe(some({"provider": maybe(st.sampled_from(["openai", "replay"])), "model": maybe(st.just("m"))},
                                       {}, {"provider": st.just("nope") | long_text})),
          "final_profile": maybe(some({"provider": maybe(st.sampled_from(["openai", "replay"])), "model": maybe(st.just("m"))}, {}))},
         {"final_schema": maybe(schemas), "allowed_tools": maybe(st.lists(st.sampled_from(["echo", "nope"]) | long_text, max_size=2)),
          "context": junk}, plan_mistakes),
)


def lane_line(value: Any) -> bytes:
    """One JSON line; non-JSON Python values (NaN, tagged scalars) are written as JSON can't."""
    def plain(v: Any) -> Any:
        if isinstance(v, (Tagged, Raw)):
            return v.text
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return v

    return json.dumps(plain(value), ensure_ascii=False).encode("utf-8", "surrogatepass")


lane_lines = st.one_of(
    lanes.map(lane_line), lanes.map(lane_line), lanes.map(lane_line), junk.map(lane_line),
    st.binary(max_size=40),
    st.sampled_from([b"{", b"NaN", b'{"item_key": "x", "calls": [{"tool": "echo", "args": {"n": NaN}}]}',
                     b'{"item_key": "x", "calls": [{"tool": "echo", "args": {"n": 1e400}}]}',
                     b'{"item_key": "x", "calls": [{"tool": "echo", "args": {"s": "\\ud800"}}]}',
                     b"[" * 2000 + b"]" * 2000, b"\xff\xfe", b'"' + b"\xc3\xa6" * 5000 + b'"']),
    st.integers(1, 1500).map(lambda d: b'{"item_key": "deep", "calls": [{"tool": "echo", "args": {"x": '
                             + b"[" * d + b"]" * d + b"}}]}"),
)
lane_streams = st.lists(lane_lines, max_size=6).map(lambda lines: b"\n".join(lines) + b"\n")

# ---------------------------------------------------------------------------------------------
# the checks

_RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def check_findings(problems: list[Problem]) -> None:
    """Every finding is placed, uses a known code, quotes at most an excerpt of any long value,
    and prints as one line per finding with no raw control character."""
    for p in problems:
        assert p.code in CODES, p
        assert p.level in ("error", "warning"), p
        assert p.file and p.line >= 1 and p.col >= 1, p
        for text in (p.message, p.hint, p.path):
            assert LONG_CHAR * (EXCERPT + 1) not in text, f"a long value quoted whole: {p}"
            assert len(text) <= 1000, f"a message of {len(text)} characters: {p.code} {text[:200]}"
    text = format_text(problems)
    assert not _RAW_CONTROL.search(text), text
    assert text.count("\n") == len(problems)


def check_validate(path: Path) -> None:
    """What ``toolloop validate PATH`` does: tell the file's kind, then check it as ``run`` would."""
    from toolloop_cli.lint.check import Checker, Flags
    from toolloop_cli.lint.discover import discover

    found = discover([path])
    report = Checker(Flags()).check(found.targets)
    check_findings(found.problems + report.problems)


def check_registry(folder: Path, document: str) -> None:
    path = folder / "fuzz-registry.yml"
    path.write_text(document, encoding="utf-8", errors="surrogatepass")
    contract, problems = load_registry(path)
    check_findings(problems)
    assert (contract is None) == any(p.level == "error" for p in problems)
    if contract is not None:
        contract.tool_hashes()
    check_validate(path)


def write_base(folder: Path) -> None:
    (folder / "reg.yml").write_text(BASE_REGISTRY, encoding="utf-8")
    key = "-----BEGIN OPENSSH PRIVATE KEY-----\n" + ("b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ" * 40 + "\n") * 50
    (folder / "not_a_registry.txt").write_text(key, encoding="utf-8")


def check_plan(folder: Path, document: str, lanes_in: bytes | None = None, stream: bool = False) -> None:
    path = folder / "fuzz-plan.yml"
    path.write_text(document, encoding="utf-8", errors="surrogatepass")
    decl, col = load_plan(path)
    check_findings(col.problems)
    if lanes_in is None:
        check_validate(path)
    try:
        admitted = admit_plan(path, lanes=None if lanes_in is None else io.BytesIO(lanes_in), lanes_name="lanes.jsonl",
                              stream=stream)
    except ConfigError as exc:
        check_findings(exc.problems)
        assert any(p.level == "error" for p in exc.problems)
        return
    check_findings(admitted.warnings)
    for call in admitted.calls:
        assert call.args is None or isinstance(call.args, dict)
    if admitted.stream is not None:
        while True:
            lane = admitted.stream.next_lane()
            if lane is None:
                break
            if isinstance(lane, RejectedLane):
                check_findings(lane.problems)
                assert lane.problems


def plan_document(plan: dict) -> str:
    return to_yaml(plan) + "\n"


def stream_plan() -> str:
    return "version: 1\nregistry: reg.yml\nsubagent: w\nmode: parallel\nmax_concurrency: 2\n"


# ---------------------------------------------------------------------------------------------
# path-bearing keys: every key whose value names a file or folder, given a path no file system
# takes, a special file, or a folder where a file belongs

#: paths relative to the fuzz folder (write_base makes them): a pipe nobody writes to would
#: block a reader for ever, /dev/zero never ends
hostile_paths = st.one_of(
    st.sampled_from(["", ".", "..", "/", "missing.yml", "reg.yml", "not_a_registry.txt", "sub", "sub/", "fifo",
                     "/dev/null", "/dev/zero", "/proc/self/status", "~", "file:///etc/passwd", "reg.yml/x",
                     "a\x00b.yml", "x" * 5000, "d/" * 3000 + "x", "\u202e.yml", "é/ü.md"]),
    control_text, long_text,
)


def _path_value(path: str) -> Raw:
    return Raw(_yaml_str(path))


path_registries = st.builds(
    lambda app_root, plan, which: {
        "version": 1, **({"app_root": _path_value(app_root)} if which != "plan" else {"app_root": str(APP)}),
        "subagents": {"w": {"runner_defaults": {"tool_timeout_s": 5}, "tools": {
            "echo": {"callable": "testapp.tools:echo", "description": "d", "input_schema": {}, "output_schema": {}},
            "agent": {"plan": _path_value(plan), "description": "a child plan"}}}}},
    hostile_paths, hostile_paths, st.sampled_from(["app_root", "plan", "both"]),
)
path_plans = st.builds(
    lambda registry, instructions, prompt, fixture, which: {
        "version": 1, "registry": _path_value(registry) if which == "registry" else "reg.yml", "subagent": "w",
        "mode": "routed", "goal": "g", "allowed_tools": ["echo"],
        **({"instructions": _path_value(instructions)} if which in ("instructions", "all") else {}),
        "router_profile": {"provider": "replay", "fixture": _path_value(fixture) if which in ("fixture", "all")
                           else "fixture.jsonl"},
        "final_profile": {"provider": "replay", "fixture": "fixture.jsonl"},
        "budget": {"max_iterations": 2, "max_tokens": 100, "max_tool_calls": 1, "timeout_s": 5},
        **({"supervisor": {"judge": {"profile": {"provider": "replay", "fixture": "fixture.jsonl"},
                                     "prompt": _path_value(prompt)}, "on_violation": "abort"}}
           if which in ("prompt", "all") else {}),
    },
    hostile_paths, hostile_paths, hostile_paths, hostile_paths,
    st.sampled_from(["registry", "instructions", "prompt", "fixture", "all"]),
)


def write_paths_base(folder: Path) -> None:
    """What the path generators name: a folder, a pipe, a fixture (write_base writes the rest)."""
    import os

    (folder / "sub").mkdir(exist_ok=True)
    if not (folder / "fifo").exists():
        os.mkfifo(folder / "fifo")
    (folder / "fixture.jsonl").write_text(json.dumps({"type": "model_answer", "n": 1, "role": "router", "model": "m",
                                                      "text": "{}", "input_tokens": 1, "output_tokens": 1}) + "\n")
