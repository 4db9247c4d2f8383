#!/usr/bin/env python3
"""Start-up time of ``toolloop --help`` against a bare Typer app with one command.

Shell completion and ``--help`` re-run the program every time, so the CLI must start fast. Both
programs run with this same interpreter, each N times in a fresh subprocess; the script prints
mean and median wall time in milliseconds and the ratio toolloop / bare. The bare app is timed
twice: with Typer's defaults (Rich-formatted help) and with plain help as toolloop uses
(``rich_markup_mode=None``), which is the like-for-like baseline.

    python bench/bench_help.py            # 20 runs each
    python bench/bench_help.py -n 50
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BARE_APP = '''\
import sys

import typer

# "plain" uses the same help settings as toolloop (no Rich formatting); default is Typer's own.
app = typer.Typer(rich_markup_mode=None) if sys.argv[1:2] == ["plain"] else typer.Typer()
if sys.argv[1:2] == ["plain"]:
    del sys.argv[1]


@app.command()
def hello(name: str = "world") -> None:
    """Say hello."""
    typer.echo(f"hello {name}")


if __name__ == "__main__":
    app()
'''


def time_runs(argv: list[str], n: int, env: dict[str, str]) -> list[float]:
    """Wall time of ``n`` runs of ``argv`` in milliseconds, after one untimed warm-up run."""
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
    out = []
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
        out.append((time.perf_counter() - start) * 1000)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20, help="runs per program (default 20)")
    opts = parser.parse_args()
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100"}
    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp) / "bare_app.py"
        bare.write_text(BARE_APP, encoding="utf-8")
        programs = {
            "bare typer --help": [sys.executable, str(bare), "--help"],
            "bare plain --help": [sys.executable, str(bare), "plain", "--help"],
            "toolloop --help": [sys.executable, "-m", "toolloop_cli", "--help"],
        }
        results = {name: time_runs(argv, opts.n, env) for name, argv in programs.items()}
    print(f"python {sys.version.split()[0]} ({sys.executable}), {opts.n} runs each")
    print(f"{'program':<20} {'mean ms':>9} {'median ms':>10} {'min ms':>8} {'max ms':>8}")
    for name, times in results.items():
        print(f"{name:<20} {statistics.mean(times):>9.1f} {statistics.median(times):>10.1f} "
              f"{min(times):>8.1f} {max(times):>8.1f}")
    ours = results["toolloop --help"]
    for name in ("bare typer --help", "bare plain --help"):
        base = results[name]
        print(f"ratio toolloop / {name.removesuffix(' --help')}: mean {statistics.mean(ours) / statistics.mean(base):.2f}, "
              f"median {statistics.median(ours) / statistics.median(base):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
