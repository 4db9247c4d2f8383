"""toolloop's own declaration models built without pydantic's plugin loader.

The first time pydantic builds a validator it looks for plugins in the entry points of every
installed distribution, unless ``PYDANTIC_DISABLE_PLUGINS`` (pydantic's documented switch) says
not to: a scan of all the packages' metadata, paid by every short command. toolloop's models have
no use for plugins, so their module sets the variable while its classes are built and then puts
it back as it was: models an App defines in the same process are built as before, with the
plugins installed (pydantic looks for them then)."""

from __future__ import annotations

import os

_VAR = "PYDANTIC_DISABLE_PLUGINS"


def plugins_off() -> str | None:
    """Turn pydantic's plugins off; returns what the variable was, for ``plugins_back``."""
    before = os.environ.get(_VAR)
    os.environ[_VAR] = "1"
    return before


def plugins_back(before: str | None) -> None:
    """Put the variable back as ``plugins_off`` found it."""
    if before is None:
        os.environ.pop(_VAR, None)
    else:
        os.environ[_VAR] = before
