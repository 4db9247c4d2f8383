"""The command line at its edges: ``call`` names its run, ``toolloop`` and ``python -m
toolloop_cli`` resolve callables alike, and paths no file system takes are usage errors or
findings, never an internal error."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DEMO, jsonl, write


def test_call_prints_its_run_id_on_standard_error_before_the_call_runs(cli):
    proc = cli("call", str(DEMO), "worker-a", "transform", "--args", '{"text": "hi"}', "--format", "jsonl")
    assert proc.returncode == 0, proc.stderr
    run_id = jsonl(proc.stdout)[-1]["run_id"]
    assert proc.stderr.decode() == f"toolloop: run {run_id}\n"
    shown = cli("runs", "show", run_id, "--format", "jsonl")
    assert shown.returncode == 0 and jsonl(shown.stdout)[0]["run_id"] == run_id
