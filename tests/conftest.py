"""Shared fixtures: the repository's paths, a CLI runner that runs the real command in a
subprocess, and helpers to write registries and plans into a temporary folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "registries" / "demo.yml"
APP = ROOT / "tests" / "app"
# the test App's registry puts this folder on sys.path too; the same entry keeps one module identity
if str(APP) not in sys.path:
    sys.path.insert(0, str(APP))


@pytest.fixture
def cli(tmp_path):
    """Run ``toolloop ARGS`` in a subprocess (cwd = tmp_path, state there too)."""

    def run(*args: str, input: bytes | None = None, cwd: Path | None = None, env: dict | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
        full_env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **(env or {})}
        full_env.pop("TOOLLOOP_STATE_DIR", None) if env is None or "TOOLLOOP_STATE_DIR" not in env else None
        return subprocess.run(
            [sys.executable, "-m", "toolloop_cli", *args],
            cwd=cwd or tmp_path, input=input, capture_output=True, timeout=timeout, env=full_env,
        )

    return run


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def jsonl(stdout: bytes) -> list[dict]:
    return [json.loads(line) for line in stdout.decode().splitlines() if line.strip()]


@pytest.fixture
def model_server():
    """A scripted model server on 127.0.0.1 (tests/modelserver.py), stopped after the test."""
    from modelserver import ModelServer

    server = ModelServer().start()
    yield server
    server.stop()


def state_bytes(folder) -> bytes:
    """Every byte of every file under ``folder`` (a state folder: state.db, its WAL, exports), in
    name order: what a leak test greps for a secret."""
    from pathlib import Path

    return b"".join(p.read_bytes() for p in sorted(Path(folder).rglob("*")) if p.is_file())
