"""Following docs/testing.md never dirties the examples: every shell block that records
(``--record``), run as written from a copy of the checkout, leaves the shipped plans, fixtures
and registries byte for byte as they were, and records somewhere else."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ("plans", "registries")


def _files(top: Path) -> dict[str, bytes]:
    return {str(p.relative_to(top)): p.read_bytes() for d in SHIPPED for p in sorted((top / d).rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def test_the_record_example_writes_to_a_scratch_copy(tmp_path):
    text = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```sh\n(.*?)```", text, re.S) if "--record" in b]
    assert blocks, "docs/testing.md shows how to record"
    checkout = tmp_path / "checkout"
    for d in SHIPPED:
        shutil.copytree(ROOT / d, checkout / d, ignore=shutil.ignore_patterns("__pycache__"))
    before = _files(checkout)
    assert before == _files(ROOT)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "toolloop").write_text(f"#!/bin/sh\nexec {sys.executable} -m toolloop_cli \"$@\"\n")
    (bin_dir / "toolloop").chmod(0o755)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "TMPDIR": str(scratch),
           "TOOLLOOP_STATE_DIR": str(tmp_path / "state"), "NO_COLOR": "1"}
    for block in blocks:
        done = subprocess.run(["bash", "-c", block], cwd=checkout, env=env, capture_output=True, text=True,
                              timeout=600)
        assert _files(checkout) == before, f"the block changed the examples:\n{block}"
        if "mktemp" in block:
            assert done.returncode == 0, done.stderr
            [copy] = scratch.iterdir()
            recorded = copy / "plans" / "fixtures" / "routed-example.jsonl"
            assert recorded.read_bytes() != before["plans/fixtures/routed-example.jsonl"]  # it did record
