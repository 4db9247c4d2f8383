"""Standard output or the audit file that cannot be written: one line, exit 1, the journal intact
and the run resumable; a closed standard output refuses to start. Never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT, jsonl

PLAN = str(ROOT / "plans" / "sequential.yml")


def toolloop(tmp_path, *args, stdout=None, stderr=subprocess.PIPE, pass_fds=()):
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "toolloop_cli", *args], cwd=tmp_path, stdout=stdout, stderr=stderr,
                          env=env, timeout=120, pass_fds=pass_fds)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("where", ["stdout", "audit"])
def test_a_full_disk_stops_the_run_with_one_line_and_resume_finishes_it(tmp_path, cli, where):
    if where == "stdout":
        with open("/dev/full", "wb") as full:
            proc = toolloop(tmp_path, "run", PLAN, "--format", "jsonl", stdout=full)
    else:
        proc = toolloop(tmp_path, "run", PLAN, "--audit", "/dev/full", stdout=subprocess.DEVNULL)
    err = proc.stderr.decode()
    assert proc.returncode == 1 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and "No space left on device" in err
    run_id = err.split("toolloop resume ")[1].strip()
    done = cli("resume", run_id)
    assert done.returncode == 0, done.stderr.decode()
    assert [r["status"] for r in jsonl(done.stdout)[:-1]] == ["ok"] * 4


def test_a_closed_standard_output_refuses_to_start(tmp_path):
    proc = subprocess.run(f"'{sys.executable}' -m toolloop_cli run '{PLAN}' >&-", shell=True, cwd=tmp_path,
                          capture_output=False, stderr=subprocess.PIPE, timeout=120)
    err = proc.stderr.decode()
    assert proc.returncode == 1 and "standard output is closed" in err and "Traceback" not in err
    # nothing was written into the state database through the closed descriptor's number
    db = tmp_path / ".toolloop" / "state.db"
    assert not db.exists() or b'"type":"receipt"' not in db.read_bytes()
