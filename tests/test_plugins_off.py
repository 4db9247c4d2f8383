"""toolloop's declaration models are built without pydantic's plugin loader (a scan of every
installed package's entry points), and leave pydantic's plugin switch as they found it, so
models an App defines afterwards in the same process get the plugins installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = """
import json, os
from pydantic.plugin import _loader
from toolloop_cli.contract.models import RegistryDecl
from toolloop_cli.plan.models import PlanDecl
PlanDecl.model_validate({"version": 1, "subagent": "b", "mode": "sequential", "calls": [{"tool": "t"}]})
RegistryDecl.model_validate({"version": 1, "subagents": {"b": {"tools": {}}}})
scanned_by_toolloop = _loader._plugins is not None
switch = os.environ.get("PYDANTIC_DISABLE_PLUGINS")
from pydantic import BaseModel
class AppModel(BaseModel):
    x: int
print(json.dumps([scanned_by_toolloop, switch, _loader._plugins is not None]))
"""


def probe(**env: str) -> list:
    clean = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


def test_toolloop_models_do_not_load_plugins_and_an_app_model_still_does():
    assert probe() == [False, None, True]


def test_a_switch_the_user_set_is_left_as_it_was():
    assert probe(PYDANTIC_DISABLE_PLUGINS="some_plugin") == [False, "some_plugin", True]
