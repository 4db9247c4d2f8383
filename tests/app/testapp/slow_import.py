"""A module whose import is slow, or fails, when the environment asks for it: writes its process
id to ``TOOLLOOP_TEST_IMPORT_PIDFILE`` (when set), sleeps ``TOOLLOOP_TEST_IMPORT_DELAY`` seconds,
then raises ValueError when ``TOOLLOOP_TEST_IMPORT_FAIL`` is set (its value is the message)."""

from __future__ import annotations

import os
import time

if os.environ.get("TOOLLOOP_TEST_IMPORT_PIDFILE"):
    with open(os.environ["TOOLLOOP_TEST_IMPORT_PIDFILE"], "w") as _fh:
        _fh.write(str(os.getpid()))
_delay = float(os.environ.get("TOOLLOOP_TEST_IMPORT_DELAY") or 0)
if _delay:
    time.sleep(_delay)
if os.environ.get("TOOLLOOP_TEST_IMPORT_FAIL"):
    raise ValueError(os.environ["TOOLLOOP_TEST_IMPORT_FAIL"])


def ready(**kwargs) -> dict:
    """The process it runs in, and what it received."""
    return {"pid": os.getpid(), "received": kwargs}
