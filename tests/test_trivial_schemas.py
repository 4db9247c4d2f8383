"""Trivial schemas (every value passes, or a bare ``{type: object}``) are answered without the
compiled validator, and answer exactly as it does: the same verdict for every value, and the
same error messages for a value that fails."""

from __future__ import annotations

import jsonschema_rs
import pytest

from toolloop_cli.contract import schemas
from toolloop_cli.contract.schemas import BoundedValidator, ObjectValidator, compile_validator, schema_errors

VALUES = [
    {}, {"a": 1}, {"a": {"b": [1, 2]}}, {"": None}, [], [{}], "text", "", 0, 1, -1.5, 10**30, True, False, None,
    {"[REDACTED]": "[REDACTED]"}, "[REDACTED]", {"k": "[REDACTED]"}, [[]], {"nested": {"deep": {}}},
]

ACCEPT_ALL = [True, {}, {"title": "t"}, {"description": "d", "$comment": "c"}, {"additionalProperties": True},
              {"examples": [1], "default": 2}]
OBJECT = [{"type": "object"}, {"type": "object", "additionalProperties": True},
          {"type": "object", "title": "Result", "description": "anything"}]
EMPTY = [{"type": "object", "additionalProperties": False},
         {"type": "object", "additionalProperties": False, "title": "No arguments"}]
#: schemas that look close to trivial but are not: the compiled validator keeps them
NOT_TRIVIAL = [False, {"type": "array"}, {"type": ["object"]}, {"additionalProperties": False},
               {"type": "object", "properties": {}}, {"type": "object", "required": []},
               {"type": "object", "additionalProperties": {"type": "string"}},
               {"type": "object", "minProperties": 1}, {"type": "object", "additionalProperties": {}},
               {"$schema": "https://json-schema.org/draft/2020-12/schema"}, {"type": "object", "$ref": "#"},
               {"not": {}}, {"type": "object", "maxProperties": 0}]


def _reference(schema, mask):
    kwargs = {"offline": True, **({"mask": "[REDACTED]"} if mask else {})}
    return BoundedValidator(jsonschema_rs.validator_for(schema, **kwargs))


def test_the_schemas_are_told_apart():
    assert [schemas._trivial(s) for s in ACCEPT_ALL] == ["any"] * len(ACCEPT_ALL)
    assert [schemas._trivial(s) for s in OBJECT] == ["object"] * len(OBJECT)
    assert [schemas._trivial(s) for s in EMPTY] == ["empty"] * len(EMPTY)
    assert [schemas._trivial(s) for s in NOT_TRIVIAL] == [None] * len(NOT_TRIVIAL)


@pytest.mark.parametrize("mask", [False, True])
@pytest.mark.parametrize("schema", ACCEPT_ALL)
def test_a_schema_every_value_passes_compiles_no_validator(schema, mask):
    assert compile_validator(schema, mask=mask) is None
    ref = _reference(schema, mask)
    assert all(ref.is_valid(v) for v in VALUES)  # nothing is lost by not asking


@pytest.mark.parametrize("mask", [False, True])
@pytest.mark.parametrize("schema", OBJECT + EMPTY + NOT_TRIVIAL)
def test_the_fast_check_agrees_with_the_compiled_validator(schema, mask):
    fast, ref = compile_validator(schema, mask=mask), _reference(schema, mask)
    assert fast is not None
    assert isinstance(fast, ObjectValidator) == (schema in OBJECT + EMPTY)
    for value in VALUES:
        assert fast.is_valid(value) == ref.is_valid(value), (schema, value)
        assert schema_errors(fast, value, limit=3) == schema_errors(ref, value, limit=3), (schema, value)
        if not ref.is_valid(value):
            assert schema_errors(fast, value, limit=3)  # a refusal still says why


def test_a_bare_object_schema_is_not_asked_of_a_dict():
    class Counting:
        calls = 0

        def is_valid(self, instance):
            Counting.calls += 1
            return isinstance(instance, dict)

    v = ObjectValidator(Counting(), empty=False)
    assert v.is_valid({"a": 1}) and v.is_valid({})
    assert Counting.calls == 0
    assert not v.is_valid([1])  # not a dict: the compiled validator answers
    assert Counting.calls == 1
    closed = ObjectValidator(Counting(), empty=True)
    assert closed.is_valid({}) and not closed.is_valid({"a": 1})
    assert Counting.calls == 1


def test_messages_of_a_refused_value_are_those_of_today():
    # the words users see, through the validators a registry compiles (masked where it redacts)
    closed = compile_validator({"type": "object", "additionalProperties": False}, mask=False)
    assert schema_errors(closed, {"x": 1}) == ["False schema does not allow 1"]
    assert schema_errors(compile_validator({"type": "object"}, mask=False), [1, 2]) == ['[1,2] is not of type "object"']
    assert schema_errors(compile_validator({"type": "object"}, mask=True), [1, 2]) == ['[REDACTED] is not of type "object"']
