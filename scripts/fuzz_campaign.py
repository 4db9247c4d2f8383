#!/usr/bin/env python3
"""A long property-based campaign over the loaders, registry compilation, plan admission and lane
reading: the generators and checks of ``tests/test_fuzz.py`` (``tests/fuzzing.py``), with many
more examples and a fresh random seed each run. Not part of the suite; run it now and then:

    python scripts/fuzz_campaign.py                    # 2,000 examples per target
    python scripts/fuzz_campaign.py --examples 20000 --target lanes
    python scripts/fuzz_campaign.py --seed 1234        # repeat a campaign

Each failure is printed with the smallest example Hypothesis found (to paste into a regression
test) and the campaign goes on with the next target; the exit code is 1 when any target failed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]


def main() -> int:
    from hypothesis import HealthCheck, given, seed, settings
    from hypothesis import strategies as st

    import fuzzing

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2000, help="examples per target (default 2000)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: a fresh one)")
    parser.add_argument("--target", action="append", choices=["registries", "text", "plans", "lanes"],
                        help="what to fuzz (repeatable; default all)")
    opts = parser.parse_args()
    chosen = opts.target or ["registries", "text", "plans", "lanes"]
    run_seed = opts.seed if opts.seed is not None else int(time.time())
    print(f"seed {run_seed}, {opts.examples} examples per target", flush=True)
    folder = Path(tempfile.mkdtemp(prefix="toolloop-fuzz-"))
    fuzzing.write_base(folder)
    long_run = settings(max_examples=opts.examples, deadline=None, database=None, print_blob=True,
                        suppress_health_check=list(HealthCheck))

    targets = {
        "registries": given(fuzzing.registries)(lambda r: fuzzing.check_registry(folder, fuzzing.to_yaml(r) + "\n")),
        "text": given(st.text(max_size=400))(lambda t: fuzzing.check_registry(folder, t)),
        "plans": given(fuzzing.plans)(lambda p: fuzzing.check_plan(folder, fuzzing.plan_document(p))),
        "lanes": given(fuzzing.lane_streams, st.booleans())(
            lambda s, one: fuzzing.check_plan(folder, fuzzing.stream_plan(), s, stream=one)),
    }
    failed = []
    for name in chosen:
        started = time.perf_counter()
        test = seed(run_seed)(long_run(targets[name]))
        try:
            test()
        except Exception:  # noqa: BLE001 - report and go on with the next target
            failed.append(name)
            print(f"FAILED {name}:", flush=True)
            traceback.print_exc()
        else:
            print(f"ok {name} ({time.perf_counter() - started:.0f} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
