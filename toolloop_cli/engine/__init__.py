"""The engine: run-time gates, executors, one governed call, settlement, run sessions and runners.

What tests, benchmarks and embedding programs use is exported here (loaded on first use, so that
importing a submodule, such as the process worker's, stays light):

- ``RunContext`` / ``RunServices``: what the calls of one run share;
- ``run_lanes``, ``run_batch``, ``run_parallel_batch``: the lanes runner, in process;
- ``execute_call``: one governed call; ``check_call``: the gates before it;
- ``Settlement``: counting, committing, ordering and emitting records;
- ``RunSession``, ``execute_plan``, ``RunOptions``: a whole journaled run;
- ``Launch``: a run composed from what a command asks (new, resumed, replayed, an ad-hoc call);
- ``HaltPolicy``, ``new_run_id``.
"""

from __future__ import annotations

from .._lazy import lazy_names

_WHERE = {
    "HaltPolicy": "runstate",
    "RunState": "runstate",
    "RunContext": "context",
    "RunServices": "context",
    "Settlement": "settle",
    "check_call": "gates",
    "execute_call": "call",
    "run_lanes": "lanes",
    "run_batch": "lanes",
    "run_parallel_batch": "lanes",
    "RunSession": "session",
    "RunnerEnd": "session",
    "RunOptions": "session",
    "new_run_id": "session",
    "execute_plan": "run",
    "Launch": "launch",
}

__all__ = sorted(_WHERE)


__getattr__ = lazy_names(__name__, _WHERE, globals())
