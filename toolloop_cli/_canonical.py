"""Canonical JSON (sorted keys, no whitespace) and its hashes: the basis of args_sha256,
contract hashes and cache keys. Integers of any size are written exactly (``_json``)."""

from __future__ import annotations

import hashlib
from typing import Any

from ._json import dumps


def canonical_bytes(value: Any) -> bytes:
    """The canonical JSON encoding of ``value``: sorted keys, no whitespace, UTF-8."""
    return dumps(value, canonical=True)


def sha256_of(value: Any) -> str:
    """Hex SHA-256 of the canonical JSON of ``value``."""
    return hashlib.sha256(dumps(value, canonical=True)).hexdigest()
