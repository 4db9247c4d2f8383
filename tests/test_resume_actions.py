"""What resume does with each call, by the status of its receipt: the table in engine/resume.py."""

from __future__ import annotations

import pytest

from toolloop_cli.engine.resume import resume_action

# (status, in-flight at-most-once write, --retry-failed, --retry-interrupted) -> action
TABLE = [
    ("ok", False, False, False, "keep"),
    ("ok", False, True, True, "keep"),
    ("error", False, False, False, "keep"),
    ("error", False, True, False, "run"),
    ("timeout", False, True, False, "run"),
    ("invalid_output", False, False, True, "keep"),
    ("invalid_input", False, True, False, "run"),
    ("interrupted", False, False, False, "keep"),
    ("interrupted", False, True, False, "keep"),
    ("interrupted", False, False, True, "run"),
    ("denied", False, True, True, "keep"),
    ("duplicate", False, True, True, "keep"),
    ("budget_exceeded", False, True, True, "keep"),
    (None, False, False, False, "run"),
    ("cancelled", False, False, False, "run"),
    ("skipped", False, False, False, "run"),
    (None, True, False, False, "interrupted"),
    ("cancelled", True, True, False, "interrupted"),
    (None, True, False, True, "run"),
    ("cancelled", True, False, True, "run"),
]


@pytest.mark.parametrize("status, in_flight, retry_failed, retry_interrupted, expected", TABLE)
def test_resume_action_per_status(status, in_flight, retry_failed, retry_interrupted, expected):
    assert resume_action(status, in_flight_write=in_flight, retry_failed=retry_failed,
                         retry_interrupted=retry_interrupted) == expected
