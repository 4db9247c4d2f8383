#!/usr/bin/env python3
"""Start-up figures of two toolloop trees side by side: each built as a wheel and installed with
compiled bytecode (as bench/_install.py does), then the same command run for A, for B and for
the bare baseline in turn, round after round (which side goes first alternating), CPU time of
each whole process from wait4. A change smaller than the spread of one run against another on a
shared machine shows only this way: as the median of the per-round B/A ratios.

    git worktree add /tmp/before main          # or any checkout of the code before
    python bench/bench_ab.py /tmp/before . --figure validate --rounds 11
    python bench/bench_ab.py /tmp/before . --figure startup --rounds 11
    python bench/bench_ab.py --floor            # what the imports every command needs cost against the baselines
    python bench/bench_ab.py /tmp/before . --figure startup --instructions   # instruction counts instead

With ``--instructions`` each side runs under valgrind's callgrind instead (``--rounds`` times,
default 3 there, the sides at once, two at a time): the count of instructions does not depend on
what else the machine runs, so a change of a few per cent shows in one run. PYTHONHASHSEED is
fixed; the count still moves a little from run to run (the state folder's files, the clock).
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import statistics
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _measure import load_text, run_child  # noqa: E402
from bench_batch import APP, registry_text  # noqa: E402
from bench_validate import write_big_registry  # noqa: E402

BARE = {"startup": [sys.executable, "-c", "import trio, sqlite3, json"],
        "validate": [sys.executable, "-c", "import sys, yaml; yaml.load(open(sys.argv[1], 'rb'), Loader=yaml.CSafeLoader)",
                     "big/registry.yml"]}
#: the baselines with the imports no toolloop command can do without added: the CLI framework
#: (typer; its pydantic parameter adapters are no longer built for plain values), and for running a
#: plan the YAML loader, the JSON Schema validators and the JSON codec it reads and writes with
#: (validate: the validators)
FLOOR = {"startup": "import trio, sqlite3, json, typer, yaml, jsonschema_rs, orjson",
         "validate": "import sys, yaml, typer, jsonschema_rs; "
                     "yaml.load(open(sys.argv[1], 'rb'), Loader=yaml.CSafeLoader)"}


def install(src: Path, into: Path) -> dict:
    wheels = into / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(src)], check=True)
    site = into / "site"
    with zipfile.ZipFile(next(wheels.glob("*.whl"))) as zf:
        zf.extractall(site)
    compileall.compile_dir(str(site), quiet=1)
    return dict(os.environ, PYTHONPATH=str(site))


def command(figure: str, d: Path) -> list[str]:
    if figure == "startup":
        return [sys.executable, "-m", "toolloop_cli", "run", "one.yml", "--format", "jsonl", "--state-dir", str(d / "state")]
    return [sys.executable, "-m", "toolloop_cli", "validate", "big/registry.yml"]


def prepare(d: Path) -> None:
    (d / "benchapp.py").write_text(APP)
    (d / "reg.yml").write_text(registry_text(d))
    (d / "one.yml").write_text(
        "version: 1\nregistry: reg.yml\nsubagent: b\nmode: sequential\ncalls:\n  - {tool: noop_async, args: {}}\n")
    (d / "big").mkdir()
    write_big_registry(d / "big" / "registry.yml", d / "big", 500)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", type=Path, nargs="?", help="the tree before")
    ap.add_argument("b", type=Path, nargs="?", help="the tree after")
    ap.add_argument("--figure", choices=("startup", "validate"), default="startup")
    ap.add_argument("--rounds", type=int, default=None, help="paired rounds (default 11; 3 with --instructions)")
    ap.add_argument("--floor", action="store_true", help="the baselines against themselves with the imports every command needs")
    ap.add_argument("--instructions", action="store_true", help="count instructions under callgrind instead of CPU time")
    opts = ap.parse_args()
    if opts.rounds is None:
        opts.rounds = 3 if opts.instructions else 11
    with tempfile.TemporaryDirectory(prefix="toolloop-ab-") as tmp:
        d = Path(tmp)
        prepare(d)
        if opts.floor:
            sides = {f"{f} baseline": (BARE[f], None) for f in BARE}
            sides.update({f"{f} baseline + the imports every command needs": ([*BARE[f][:2], FLOOR[f], *BARE[f][3:]], None) for f in FLOOR})
        else:
            if opts.a is None or opts.b is None:
                ap.error("name the two trees, or --floor")
            (d / "a").mkdir(), (d / "b").mkdir()
            sides = {"A": (command(opts.figure, d / "a"), install(opts.a, d / "a")),
                     "B": (command(opts.figure, d / "b"), install(opts.b, d / "b")),
                     "bare": (BARE[opts.figure], None)}
        if opts.instructions:
            return count_instructions(sides, d, opts.rounds, opts.floor)
        cpu: dict[str, list[float]] = {k: [] for k in sides}
        for r in range(opts.rounds + 1):  # round 0 warms the page cache and the state folders
            for k in (list(sides) if r % 2 else list(sides)[::-1]):
                cmd, env = sides[k]
                used = run_child(cmd, d, env=env)
                if r:
                    cpu[k].append(used.cpu * 1000)
        print(load_text())
        for k, v in cpu.items():
            print(f"  {k}: {statistics.median(v):.0f} ms CPU (median of {opts.rounds})")
        if not opts.floor:
            a, b, bare = (statistics.median(cpu[k]) for k in ("A", "B", "bare"))
            ratios = [y / x for x, y in zip(cpu["A"], cpu["B"])]
            per = statistics.median(ratios)
            print(f"  A / bare {a / bare:.2f}x, B / bare {b / bare:.2f}x; B / A per round: median {per:.3f}")
            # the spread, and each side against the baseline run beside it: the load moves all three
            # together from round to round, so the per-round ratios shake less than the medians' ratio
            low, _, high = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (per, per, per)
            a_bare = statistics.median(x / z for x, z in zip(cpu["A"], cpu["bare"]))
            b_bare = statistics.median(y / z for y, z in zip(cpu["B"], cpu["bare"]))
            print(f"  B / A per round: quartiles {low:.3f} to {high:.3f}; per round against the baseline:"
                  f" A {a_bare:.2f}x, B {b_bare:.2f}x (medians)")


def count_instructions(sides: dict, d: Path, rounds: int, floor: bool) -> None:
    """Instructions of each side's whole process under callgrind, ``rounds`` times each (two
    processes at a time, never the same side twice, so no state folder is shared); the median of
    each, and B against A and against the baseline."""
    counts: dict[str, list[int]] = {k: [] for k in sides}

    def start(k: str, r: int) -> subprocess.Popen:
        cmd, env = sides[k]
        env = {**(env or os.environ), "PYTHONHASHSEED": "0"}
        return subprocess.Popen(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd], cwd=d,
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    for k, (cmd, env) in sides.items():  # as round 0 of the CPU figures: the state folders exist
        run_child(cmd, d, env=env)
    jobs = [(k, r) for r in range(rounds) for k in sides]  # a side is never beside itself
    while jobs:
        batch, jobs = jobs[:2], jobs[2:]
        procs = [(k, start(k, r)) for k, r in batch]
        for k, proc in procs:
            _out, err = proc.communicate()
            found = re.search(r"I\s+refs:\s+([\d,]+)", err)
            if proc.returncode != 0 or found is None:
                sys.exit(f"{k} failed under callgrind ({proc.returncode}): {err[-2000:]}")
            counts[k].append(int(found.group(1).replace(",", "")))
    print(load_text())
    med = {k: statistics.median(v) for k, v in counts.items()}
    for k, v in counts.items():
        print(f"  {k}: {med[k] / 1e6:,.1f} M instructions (median of {rounds}; {', '.join(f'{x / 1e6:,.1f}' for x in v)})")
    if not floor:
        print(f"  A / bare {med['A'] / med['bare']:.3f}x, B / bare {med['B'] / med['bare']:.3f}x, B / A {med['B'] / med['A']:.3f}")


if __name__ == "__main__":
    main()
