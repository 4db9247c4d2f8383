#!/usr/bin/env python3
"""A long property-based campaign over every kind of input toolloop takes from outside: registries,
plans and lane streams (``tests/fuzzing.py``), path-bearing keys, model replies (decisions, final
answers, judge verdicts, and routed runs fed them), provider replies over real HTTP on 127.0.0.1
(``tests/fuzzing_replies.py``) and a damaged journal read by every command that reads it
(``tests/fuzzing_journal.py``). The generators and checks are those of ``tests/test_fuzz.py``, with
many more cases and fresh random seeds. Not part of the suite; run it now and then:

    python scripts/fuzz_campaign.py --minutes 60          # every family, in turns, for an hour
    python scripts/fuzz_campaign.py --minutes 5 --family model_replies --family journal
    python scripts/fuzz_campaign.py --seed 1234 --minutes 10   # repeat a campaign's seeds

A case that fails does not stop the campaign: it is counted and classed (exception and the place
in toolloop it came from), and the first case of each class is kept. A case that runs past
``--case-limit`` seconds is a hang. The report gives, per family, the cases run, the exit-70s
(an exception of toolloop's own), the checks that failed (a wrong result) and the hangs; the
exit code is 1 when there is any.
"""

from __future__ import annotations

import argparse
import collections
import random
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]

#: who fixes a failure, by the module it came from (the rest: the input handling itself)
OWNERS = (("toolloop_cli/store/", "storechain"), ("toolloop_cli/providers/", "loopends"))


class Hang(Exception):
    """A case ran past the campaign's limit."""


class Tally:
    """What a family's cases came to."""

    def __init__(self) -> None:
        self.cases = 0
        self.exit70 = 0
        self.checks = 0
        self.hangs = 0
        self.classes: collections.Counter = collections.Counter()
        self.first: dict[tuple, str] = {}

    def failed(self, exc: BaseException, case: Any) -> None:
        kind = "hang" if isinstance(exc, (Hang, subprocess.TimeoutExpired)) else (
            "check" if type(exc) is AssertionError else "exit70")
        setattr(self, {"hang": "hangs", "check": "checks", "exit70": "exit70"}[kind],
                getattr(self, {"hang": "hangs", "check": "checks", "exit70": "exit70"}[kind]) + 1)
        cause = exc.__cause__ or exc
        where = _where(cause)
        key = (kind, type(cause).__name__, where)
        self.classes[key] += 1
        if key not in self.first:
            text = "".join(traceback.format_exception_only(type(cause), cause)).strip()
            self.first[key] = f"{text[:400]}\n      case: {repr(case)[:600]}"


def _where(exc: BaseException) -> str:
    where = ""
    tb = exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if "toolloop_cli" in name:
            where = f"toolloop_cli/{name.split('toolloop_cli/', 1)[1]}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where


def owner(where: str) -> str:
    return next((who for prefix, who in OWNERS if where.startswith(prefix)), "inputs")


def _alarm(_sig: int, _frame: Any) -> None:
    raise Hang("the case ran past the limit")


def families(folder: Path) -> dict[str, tuple[Any, Callable[..., None]]]:
    """Each family: (a strategy of cases, the check of one case)."""
    from hypothesis import strategies as st

    import fuzzing
    import fuzzing_journal
    import fuzzing_replies
    from modelserver import ModelServer

    fuzzing.write_base(folder)
    fuzzing.write_paths_base(folder)
    server = ModelServer().start()
    journal = fuzzing_journal.make_journal(folder / "journal")
    work = folder / "journal-work"
    return {
        "registries": (fuzzing.registries, lambda r: fuzzing.check_registry(folder, fuzzing.to_yaml(r) + "\n")),
        "text": (st.text(max_size=400), lambda t: fuzzing.check_registry(folder, t)),
        "plans": (fuzzing.plans, lambda p: fuzzing.check_plan(folder, fuzzing.plan_document(p))),
        "lanes": (st.tuples(fuzzing.lane_streams, st.booleans()),
                  lambda c: fuzzing.check_plan(folder, fuzzing.stream_plan(), c[0], stream=c[1])),
        "path_registries": (fuzzing.path_registries, lambda r: fuzzing.check_registry(folder, fuzzing.to_yaml(r) + "\n")),
        "path_plans": (fuzzing.path_plans, lambda p: fuzzing.check_plan(folder, fuzzing.plan_document(p))),
        "model_replies": (fuzzing_replies.model_replies, fuzzing_replies.check_model_reply),
        "routed_runs": (fuzzing_replies.routed_scripts, lambda s: fuzzing_replies.check_routed_run(folder, *s)),
        "provider_replies": (fuzzing_replies.provider_replies(),
                             lambda c: fuzzing_replies.check_provider_reply(server, *c)),
        "journal": (st.tuples(fuzzing_journal.damages(journal.columns), st.sampled_from(fuzzing_journal.IN_PROCESS)),
                    lambda c: fuzzing_journal.check_damaged_journal(journal, work, *c)),
        "journal_runs": (st.tuples(fuzzing_journal.damages(journal.columns),
                                   st.sampled_from([c for c in fuzzing_journal.COMMANDS if not c[2]])),
                         lambda c: fuzzing_journal.check_damaged_journal(journal, work, *c)),
    }


def run_batch(strategy: Any, check: Callable[..., None], tally: Tally, examples: int, run_seed: int,
              case_limit: float, until: float) -> None:
    from hypothesis import HealthCheck, given, seed, settings

    @seed(run_seed)
    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def batch(case: Any) -> None:
        if time.monotonic() > until:
            return
        tally.cases += 1
        signal.setitimer(signal.ITIMER_REAL, case_limit)
        try:
            check(case)
        except Exception as exc:  # noqa: BLE001 - every failure is counted and classed, then the campaign goes on
            tally.failed(exc, case)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    batch()


def report(tallies: dict[str, Tally], seconds: float) -> bool:
    print(f"\n{'family':<18} {'cases':>8} {'exit 70':>8} {'checks':>7} {'hangs':>6}")
    for name, t in tallies.items():
        print(f"{name:<18} {t.cases:>8} {t.exit70:>8} {t.checks:>7} {t.hangs:>6}")
    total = sum(t.cases for t in tallies.values())
    bad = sum(t.exit70 + t.checks + t.hangs for t in tallies.values())
    print(f"{'all':<18} {total:>8} {sum(t.exit70 for t in tallies.values()):>8} "
          f"{sum(t.checks for t in tallies.values()):>7} {sum(t.hangs for t in tallies.values()):>6}"
          f"   in {seconds / 60:.1f} min")
    for name, t in tallies.items():
        for key, count in t.classes.most_common():
            kind, exc, where = key
            print(f"\n[{name}] {kind} x{count}: {exc} at {where or '(the check)'} (owner: {owner(where)})\n"
                  f"      {t.first[key]}")
    return bad == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10, help="how long the campaign runs (default 10)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the campaign's seeds (default: fresh)")
    parser.add_argument("--family", action="append", help="a family to fuzz (repeatable; default all)")
    parser.add_argument("--batch", type=int, default=40, help="cases per family in each turn (default 40)")
    parser.add_argument("--case-limit", type=float, default=60, help="seconds before a case is a hang (default 60)")
    opts = parser.parse_args()
    campaign_seed = opts.seed if opts.seed is not None else int(time.time())
    rng = random.Random(campaign_seed)
    folder = Path(tempfile.mkdtemp(prefix="toolloop-fuzz-"))
    all_families = families(folder)
    chosen = opts.family or list(all_families)
    unknown = [f for f in chosen if f not in all_families]
    if unknown:
        parser.error(f"unknown family {', '.join(unknown)} (known: {', '.join(all_families)})")
    print(f"campaign seed {campaign_seed}, {opts.minutes:g} min, families: {', '.join(chosen)}; work in {folder}",
          flush=True)
    signal.signal(signal.SIGALRM, _alarm)
    started = time.monotonic()
    until = started + opts.minutes * 60
    tallies = {name: Tally() for name in chosen}
    turn = 0
    while time.monotonic() < until:
        turn += 1
        for name in chosen:
            if time.monotonic() >= until:
                break
            strategy, check = all_families[name]
            run_batch(strategy, check, tallies[name], opts.batch, rng.randrange(2 ** 32), opts.case_limit, until)
        print(f"turn {turn}: " + ", ".join(f"{n} {t.cases}" for n, t in tallies.items()), flush=True)
    return 0 if report(tallies, time.monotonic() - started) else 1


if __name__ == "__main__":
    sys.exit(main())
