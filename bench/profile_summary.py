#!/usr/bin/env python3
"""Summarise a py-spy profile in raw (collapsed stack) form: where the samples went, by function.

    py-spy record -r 400 -f raw -o prof.txt -- python -m toolloop_cli run ...
    python bench/profile_summary.py prof.txt [--top 40] [--thread NAME] [--under FUNCTION]

Prints, per function (file and name, lines merged), the share of samples that have it anywhere on
the stack (inclusive) and at the top (self). ``--under`` keeps only the samples whose stack
passes through a function of that name (e.g. ``execute_call``), so the shares are of that part;
``--skip`` leaves out the samples passing through one (e.g. ``_find_and_load``: imports).
With ``--idle`` the samples of threads waiting (py-spy's default leaves them out) count too.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter

_FRAME = re.compile(r"^(?P<name>.*) \((?P<file>[^():]*)(?::\d+)?\)$")


def frames(stack: str) -> list[str]:
    out = []
    for part in stack.split(";"):
        m = _FRAME.match(part.strip())
        if m is None:
            out.append(part.strip())
            continue
        file = m["file"]
        for cut in ("site-packages/", "lib/python3"):
            if cut in file:
                file = file.split(cut, 1)[1]
        out.append(f"{m['name']} ({file})")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--under", help="only samples whose stack passes through this function name")
    ap.add_argument("--thread", help="only samples of threads whose stack starts with this text")
    ap.add_argument("--skip", action="append", default=[],
                    help="leave out the samples whose stack passes through this function (e.g. _find_and_load)")
    opts = ap.parse_args()
    inclusive: Counter[str] = Counter()
    self_: Counter[str] = Counter()
    total = 0
    with open(opts.profile) as fh:
        for line in fh:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            n = int(count)
            fs = frames(stack)
            if opts.thread and not stack.startswith(opts.thread):
                continue
            if opts.skip and any(f.split(" (")[0] in opts.skip for f in fs):
                continue
            if opts.under:
                idx = next((i for i, f in enumerate(fs) if f.split(" (")[0] == opts.under), None)
                if idx is None:
                    continue
                fs = fs[idx:]
            total += n
            for f in set(fs):
                inclusive[f] += n
            self_[fs[-1]] += n
    print(f"{total} samples" + (f" under {opts.under}" if opts.under else "")
          + (f", without those under {', '.join(opts.skip)}" if opts.skip else ""))
    print(f"{'incl %':>7} {'self %':>7}  function")
    for f, n in inclusive.most_common(opts.top):
        print(f"{100 * n / total:7.1f} {100 * self_[f] / total:7.1f}  {f}")
    print("\ntop by self time:")
    for f, n in self_.most_common(opts.top // 2):
        print(f"{100 * inclusive[f] / total:7.1f} {100 * n / total:7.1f}  {f}")


if __name__ == "__main__":
    main()
