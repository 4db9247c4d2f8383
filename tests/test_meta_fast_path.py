"""Schemas are meta-checked by jsonschema-rs first; only those it finds invalid (or cannot check)
go to the Python validator, whose messages the findings quote. The fast path may never call
valid a schema the Python validator rejects, or the finding would be lost."""

from __future__ import annotations

import jsonschema
import pytest
from jsonschema.validators import validator_for

from toolloop_cli.contract.schemas import _meta_valid_fast, meta_errors

D7 = "http://json-schema.org/draft-07/schema#"
D4 = "http://json-schema.org/draft-04/schema#"
CASES = [
    {"type": "objekt"}, {"minimum": "5"}, {"required": ["a", "a"]}, {"properties": {"a": 1}}, {"pattern": 5},
    {"$defs": {"x": {"type": 3}}}, {"items": [{"type": "string"}]}, {"$schema": D7, "items": [{"type": "string"}]},
    {"format": 3}, {"enum": []}, {"dependentRequired": {"a": [1]}}, {"$id": 5}, {"$anchor": "1bad"},
    {"uniqueItems": "yes"}, {"multipleOf": 0}, {"maxLength": -1}, {"additionalProperties": "no"}, {"$ref": 5},
    {"unevaluatedProperties": 1}, {"contentMediaType": 1}, {"const": {}}, {"examples": 1},
    {"type": ["string", "string"]}, {"type": []}, {"$schema": D4, "exclusiveMinimum": True, "minimum": 1},
    {"$schema": D4, "exclusiveMinimum": 1}, {"$schema": D7, "exclusiveMinimum": True}, {"required": []},
    {"$schema": D4, "required": []}, {"prefixItems": {}}, {"allOf": []}, {"anyOf": [1]}, {"not": 1}, {"if": 1},
    {"$comment": 1}, {"title": 1}, {"deprecated": "x"}, {"readOnly": 1}, {"$dynamicAnchor": "a b"},
    {"minProperties": 1.5}, {"dependencies": {"a": 1}}, {"$schema": D7, "dependencies": {"a": 1}},
    {"propertyNames": 1}, {"contains": 1}, {"minContains": -1}, {"$schema": D7, "$id": "#foo"},
    {"type": "object", "properties": {"a": {"type": "integer", "minimum": 1}}}, {"$schema": D4, "id": 3},
    {"$schema": D4, "type": "any"}, {"$schema": 3, "type": "object"}, {"$schema": "https://example.com/s", "type": 1},
]


@pytest.mark.parametrize("schema", CASES, ids=[str(i) for i in range(len(CASES))])
def test_the_fast_meta_check_never_calls_valid_what_the_python_validator_rejects(schema):
    named = schema if isinstance(schema.get("$schema", ""), str) else {}
    cls = validator_for(named, default=jsonschema.Draft202012Validator)
    rejected = bool(list(cls(cls.META_SCHEMA).iter_errors(schema)))
    if rejected:
        assert not _meta_valid_fast(schema)
        assert meta_errors(schema)  # the finding is still reported, with the Python validator's words


def test_a_valid_schema_is_checked_without_the_python_validator():
    assert _meta_valid_fast({"type": "object", "required": ["a"], "properties": {"a": {"type": "string"}}})
    assert meta_errors({"type": "object", "properties": {"a": {"pattern": "^a+$"}}}) == []
    # an ECMA 262 pattern jsonschema-rs cannot compile is still a finding on the fast path
    assert meta_errors({"type": "string", "pattern": "(?<=a"})
