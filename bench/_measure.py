"""What the benchmarks measure a child process by, and the row every figure is reported as.

A child's CPU time (user + system, from ``os.wait4``: every thread of it, and any child it
reaped) is what a figure compares on a shared machine: a process waiting for a core does not
accumulate it, so it does not swell when other work is running, as wall time does. Wall time is
reported beside it, and is the figure only where the figure is about waiting.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Usage:
    wall: float  # seconds
    cpu: float  # seconds, user + system
    maxrss_kib: int
    stdout: bytes = b""

    @property
    def rss_mib(self) -> float:
        return self.maxrss_kib / 1024


def run_child(cmd: list[str], cwd: Path | str | None = None, stdin=None, env: dict | None = None,
              keep_stdout: bool = False) -> Usage:
    """Run ``cmd`` to the end, standard output drained through a pipe (as with ``| jq``); exit on failure."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdin=stdin if stdin is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=err, env=env)
        assert proc.stdout is not None
        chunks = []
        while block := proc.stdout.read1(1 << 16):
            if keep_stdout:
                chunks.append(block)
        proc.stdout.close()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            sys.exit(f"command failed ({proc.returncode}): {' '.join(map(str, cmd))}\n{err.read().decode()[-3000:]}")
    return Usage(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss, b"".join(chunks))


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def reference_ms() -> float:
    """CPU milliseconds of a fixed pure-Python loop (a million additions), best of three: how fast
    this machine runs Python right now, to scale the absolute figures between machines."""
    best = float("inf")
    for _ in range(3):
        c0 = time.process_time()
        x = 0
        for i in range(1_000_000):
            x += i
        best = min(best, time.process_time() - c0)
    return best * 1000


def load_text() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.1f} {five:.1f} {fifteen:.1f} on {os.cpu_count()} CPUs"


@dataclass
class Row:
    """One figure: toolloop's measurement against its baseline from the same run, and the bar."""

    name: str
    measured: float
    baseline: float | None
    ratio: float | None
    bar: str
    aim: str
    met: bool | None
    unit: str = ""
    note: str = ""
    command: str = ""


def ratio_row(name: str, measured: float, baseline: float, bar: float, aim: float, unit: str, note: str = "",
              command: str = "", higher_is_better: bool = False) -> Row:
    ratio = measured / baseline if baseline else float("inf")
    sign = ">=" if higher_is_better else "<="
    met = ratio >= bar if higher_is_better else ratio <= bar
    return Row(name, measured, baseline, ratio, f"{sign} {bar:g}x", f"{sign} {aim:g}x", met, unit, note, command)
