"""The JSON module (exact integers of any size, bounded nesting, orjson's bytes) and the text
helpers every message and table cell goes through (excerpts, escaped control characters)."""

from __future__ import annotations

import io
import json

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolloop_cli import _json
from toolloop_cli._canonical import canonical_bytes, sha256_of
from toolloop_cli._text import EXCERPT, error_text, escape, excerpt, listing, quoted

WIDE = 2 ** 64  # one past what orjson writes


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


within_64_bits = st.recursive(
    st.none() | st.booleans() | st.integers(-(2 ** 63), 2 ** 64 - 1) | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(within_64_bits)
def test_the_exact_path_writes_the_same_bytes_as_orjson(value):
    # whichever path a value takes, its hash is the same
    for canonical, option in ((False, 0), (True, orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)):
        assert _json._dumps_exact(value, option) == orjson.dumps(value, option=option)
        assert _json.dumps(value, canonical=canonical) == orjson.dumps(value, option=option)
    assert _json.loads(orjson.dumps(value)) == value


def test_integers_beyond_64_bits_are_written_and_read_exactly():
    value = {"b": [WIDE, -(2 ** 63) - 1, 10 ** 400], "a": 1.5, WIDE: "key"}
    assert canonical_bytes(value) == (b'{"18446744073709551616":"key","a":1.5,"b":[18446744073709551616,'
                                      b'-9223372036854775809,1' + b"0" * 400 + b"]}")
    assert _json.loads(canonical_bytes(value))["b"] == [WIDE, -(2 ** 63) - 1, 10 ** 400]
    assert sha256_of({"n": WIDE}) != sha256_of({"n": float(WIDE)})  # not rounded on the way
    # orjson alone reads them as floats, or refuses them as infinite
    assert isinstance(orjson.loads(str(WIDE)), float)
    assert _json.loads(str(WIDE)) == WIDE and _json.loads("1" + "0" * 400) == 10 ** 400
    # a long digit run inside a string takes the exact path and changes nothing
    assert _json.loads('{"id": "1234567890123456789012", "f": 0.1}') == {"id": "1234567890123456789012", "f": 0.1}


def test_nesting_is_written_without_recursion_and_read_up_to_a_clear_bound():
    assert _json.dumps(nested(5000)) == b"[" * 5000 + b"]" * 5000  # orjson stops at 255
    assert _json.dumps(_json.loads(b"[" * 1000 + b"]" * 1000)) == b"[" * 1000 + b"]" * 1000
    with pytest.raises(_json.JSONDecodeError, match="nests deeper than 1,024 levels"):
        _json.loads(b"[" * 2000 + b"]" * 2000)
    with pytest.raises(_json.JSONDecodeError, match="nests"):
        _json.loads(b"[" * 2000 + str(WIDE).encode() + b"]" * 2000)
    loop: list = []
    loop.append(loop)
    with pytest.raises(_json.JSONEncodeError, match="refers to itself"):
        _json.dumps(loop)


@pytest.mark.parametrize("text, words", [
    ("NaN", "unexpected character"), ("1e400", "infinity"), (f'[{WIDE}, NaN]', "NaN is not a JSON number"),
    (f'[{WIDE}, 1e400]', "infinite"), (f'["\\ud800", {WIDE}]', "lone surrogate"), (b"\xff" + str(WIDE).encode(), "UTF-8"),
    (f"[{WIDE},", "Expecting value"),
])
def test_what_is_not_json_is_refused_on_both_paths(text, words):
    with pytest.raises(_json.JSONDecodeError, match=words):
        _json.loads(text)


def test_values_json_cannot_hold_are_refused():
    for value in ({"x": {1, 2}}, {"x": b"bytes"}, {"x": [WIDE, object()]}):
        with pytest.raises(TypeError):
            _json.dumps(value)
    with pytest.raises(_json.JSONEncodeError, match="4,300"):
        _json.dumps([WIDE, 10 ** 5000 - 1])


def test_arguments_that_nest_too_deeply_or_hold_nan_are_named():
    assert _json.value_problem({"x": nested(99)}) is None
    assert _json.value_problem({"x": nested(100)}) == "it nests deeper than 100 levels"
    assert _json.value_problem({"x": [1.0, float("nan")]}) == "it holds nan, which is not a JSON number"
    assert _json.value_problem({"x": float("-inf")}) == "it holds -inf, which is not a JSON number"


def test_the_journal_and_the_record_writers_keep_wide_integers():
    from toolloop_cli.render.records import JsonArrayWriter, JsonlWriter
    from toolloop_cli.render.views import cell as _cell
    from toolloop_cli.store import _dumps, _loads

    record = {"type": "receipt", "args": {"n": WIDE}, "deep": nested(300)}
    assert _loads(_dumps(record)) == record
    out = io.BytesIO()
    JsonlWriter(out).write(record)
    assert json.loads(out.getvalue()) == record
    out = io.BytesIO()
    writer = JsonArrayWriter(out)
    writer.write(record)
    writer.close()
    assert json.loads(out.getvalue()) == [record]
    assert _cell({"n": WIDE}) == '{"n":18446744073709551616}'
    # a table of approval requests shows their arguments as JSON, wide integers included
    from toolloop_cli.render.records import _plain
    from toolloop_cli.render.tables import record_columns

    (col,) = [c for c in record_columns([{"type": "approval", "args": {"n": WIDE}}], _plain) if c.header == "args"]
    assert col.cells == ['{"n":18446744073709551616}']


# ---------------------------------------------------------------------------------------------
# excerpts and escapes


def test_an_excerpt_is_at_most_80_characters_and_says_it_was_clipped():
    assert excerpt("short") == "short"
    assert excerpt("x" * EXCERPT) == "x" * EXCERPT
    clipped = excerpt("x" * 10_000_000)
    assert len(clipped) == EXCERPT and clipped.endswith("…")
    assert excerpt({"a": [1, WIDE, "t"]}) == '{"a": [1, 18446744073709551616, "t"]}'
    assert len(excerpt(list(range(100_000)))) == EXCERPT
    assert excerpt(nested(50_000)).startswith("[[[[") and len(excerpt(nested(50_000))) == EXCERPT
    assert excerpt(10 ** 5000) == "<an integer of about 5,001 digits>"
    assert quoted("k" * 200) == "'" + "k" * 79 + "…'"
    assert listing([f"t{i}" for i in range(20)], most=3) == "t0, t1, t2, … (17 more)"


def test_control_characters_are_escaped_never_passed_through():
    assert escape("a\x1b[2Jb\n\t\r\x07\x7f\x9b") == "a\\x1b[2Jb\\n\\t\\r\\x07\\x7f\\x9b"
    assert escape("right\u202eleft\u2028\ud800") == "right\\u202eleft\\u2028\\ud800"
    assert escape("plain ünïcode ✓ 😀") == "plain ünïcode ✓ 😀"
    assert excerpt("\x1b" * 100) == "\\x1b" * 19 + "\\x1…"  # clipped after escaping: still 80 on screen
    assert len(excerpt("\x1b" * 100)) == EXCERPT


def test_an_exception_from_app_code_is_named_even_when_its_text_fails():
    class Broken(Exception):
        def __str__(self):
            raise RuntimeError("no")

    assert error_text(Broken()) == "Broken"
    assert error_text(ValueError("x" * 1000)).startswith("ValueError: xxx") and len(error_text(ValueError("x" * 1000))) < 200


def test_wide_number_tells_19_digits_in_a_row_as_the_search_does():
    # counting the digits first answers most lines without the search; the answer is the search's
    import random
    import re

    from toolloop_cli._json import wide_number

    search = re.compile(rb"\d{19}")
    rng = random.Random(27)
    alphabet = b'0123456789ab "{}:,\xff\x00\xd9\xa0'
    cases = [b"", b"1" * 18, b"1" * 19, b"1" * 18 + b"x" + b"1" * 18, b'{"n": 12345678901234567890}',
             b'{"item_key": "i1234", "calls": [{"tool": "noop_async", "args": {}}]}', "١٢٣".encode() * 10]
    cases += [bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 80))) for _ in range(20000)]
    cases += [bytes(rng.choice(b"0123456789x") for _ in range(rng.randint(15, 60))) for _ in range(20000)]
    for raw in cases:
        assert wide_number(raw) == (search.search(raw) is not None), raw
