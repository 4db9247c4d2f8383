"""The public Python API: a sorted, pinned __all__ whose every name resolves."""

from __future__ import annotations

import subprocess
import sys

import toolloop_cli

PINNED = [
    "AdmittedPlan", "ConfigError", "Contract", "DispatchError", "HaltPolicy", "Problem", "Receipt",
    "RunError", "RunOptions", "StateError", "Store", "ToolSpec", "ToolloopError", "UsageError", "admit_plan",
    "asyncio_tool", "current_call", "dispatch", "execute_plan", "load_registry", "run_batch", "run_parallel_batch",
]


def test_all_is_sorted_and_pinned():
    assert toolloop_cli.__all__ == sorted(toolloop_cli.__all__)
    assert toolloop_cli.__all__ == PINNED


def test_every_public_name_resolves():
    for name in toolloop_cli.__all__:
        assert getattr(toolloop_cli, name) is not None, name


def test_unknown_names_raise_attribute_error():
    try:
        toolloop_cli.nothing_here  # noqa: B018
    except AttributeError as exc:
        assert "nothing_here" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def test_importing_the_package_stays_light():
    code = "import sys, toolloop_cli; print(sorted(m for m in ('trio', 'jsonschema', 'pydantic', 'rich') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
