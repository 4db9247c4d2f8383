"""Canonical JSON (sorted keys, no whitespace) and its hashes: the basis of args_sha256,
contract hashes and cache keys."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

_OPTS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


def canonical_bytes(value: Any) -> bytes:
    """The canonical JSON encoding of ``value``: sorted keys, no whitespace, UTF-8."""
    return orjson.dumps(value, option=_OPTS)


def sha256_of(value: Any) -> str:
    """Hex SHA-256 of the canonical JSON of ``value``."""
    return hashlib.sha256(orjson.dumps(value, option=_OPTS)).hexdigest()
