"""Test tools: each makes one behaviour observable from outside."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import trio

# in-process observation of concurrency (engine tests run in the same interpreter)
IN_FLIGHT = {"now": 0, "max": 0, "calls": 0}
STARTS: dict = {}  # key -> trio.current_time() when hold() started


def reset() -> None:
    IN_FLIGHT.update(now=0, max=0, calls=0)
    STARTS.clear()


async def hold(key: str, seconds: float = 0.01) -> dict:
    """Async: counts itself in flight while it sleeps."""
    STARTS[key] = trio.current_time()
    IN_FLIGHT["now"] += 1
    IN_FLIGHT["calls"] += 1
    IN_FLIGHT["max"] = max(IN_FLIGHT["max"], IN_FLIGHT["now"])
    try:
        await trio.sleep(seconds)
    finally:
        IN_FLIGHT["now"] -= 1
    return {"key": key}


def echo(**kwargs):
    """Returns exactly the arguments it received."""
    return {"received": kwargs}


def marker(path: str) -> dict:
    """Writes a file: proves the call ran."""
    with open(path, "a") as fh:
        fh.write("ran\n")
    return {"path": path}


def log_run(log: str, key: str, seconds: float = 0.0) -> dict:
    """Appends its key to a log file (one line per execution), then sleeps."""
    with open(log, "a") as fh:
        fh.write(key + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    if seconds:
        time.sleep(seconds)
    return {"key": key}


def boom(message: str = "boom") -> dict:
    raise RuntimeError(message)


async def sleep_async(seconds: float) -> dict:
    await trio.sleep(seconds)
    return {"slept": seconds}


def sleep_sync(seconds: float) -> dict:
    time.sleep(seconds)
    return {"slept": seconds}


async def asyncio_sleep(seconds: float) -> dict:
    await asyncio.sleep(seconds)
    return {"slept": seconds, "loop": "asyncio"}


def not_json() -> object:
    return {"a": {1, 2}}


def printer(text: str) -> dict:
    print(text)
    sys.stdout.flush()
    return {"printed": len(text)}


def big(n: int) -> str:
    return "x" * n


def producer(status: str, extra: str = "", note: str = "") -> dict:
    """Producer-owned result read through a control envelope."""
    return {"state": status, "ready": True, "code": "c1", "kind": "k1", "facts": {"n": 1},
            "errors": [], "warnings": [], "extra": extra, "note": note}


def secret_echo(user: str, password: str) -> dict:
    if password.startswith("fail"):
        raise PermissionError(f"bad password {password} for {user}")
    return {"user": user, "token": "tok-" + password}


COUNTER_FILE = "counter.txt"


def fail_then_ok(path: str, failures: int) -> dict:
    n = int(open(path).read()) if os.path.exists(path) else 0
    with open(path, "w") as fh:
        fh.write(str(n + 1))
    if n < failures:
        raise RuntimeError(f"failure {n + 1}")
    return {"tries": n + 1}


async def boom_async(message: str = "boom") -> dict:
    """Async and always raises (usable under a mock clock: no thread)."""
    raise RuntimeError(message)


async def log_run_async(log: str, key: str, seconds: float = 0.0) -> dict:
    """Async log_run: appends its key (one line per execution), then sleeps on the event loop."""
    with open(log, "a") as fh:
        fh.write(key + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    if seconds:
        await trio.sleep(seconds)
    return {"key": key}


def log_gate(log: str, key: str, gate: str, limit_s: float = 60.0) -> dict:
    """Appends its key to a log, then waits until the file ``gate`` exists (at most ``limit_s``):
    holds a call in flight for exactly as long as a test needs."""
    with open(log, "a") as fh:
        fh.write(key + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    deadline = time.monotonic() + limit_s
    while not os.path.exists(gate):
        if time.monotonic() > deadline:
            raise TimeoutError(f"gate {gate} never opened")
        time.sleep(0.005)
    return {"key": key}


def log_fail_once(log: str, key: str, marker: str) -> dict:
    """Appends its key to a log; fails the first time (while ``marker`` does not exist)."""
    with open(log, "a") as fh:
        fh.write(key + "\n")
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise RuntimeError(f"{key}: first try fails")
    return {"key": key}


# --- one call, fully governed (tests/test_calls_*.py, test_dispatch.py, test_redaction.py,
# test_workers.py) ---------------------------------------------------------------------------

import threading as _threading  # noqa: E402

SYNC_FLIGHT = {"now": 0, "max": 0, "calls": 0}
_SYNC_LOCK = _threading.Lock()
STAMPS: list = []  # trio.current_time() at each start of `stamp`
FAILS: dict = {}  # per key: failures still to raise (flaky_async)
EVIDENCE: list = []  # records given to the evidence hook
TRIES: dict = {}  # per key: trio.current_time() of each try (flaky_async)


def reset_governed() -> None:
    SYNC_FLIGHT.update(now=0, max=0, calls=0)
    STAMPS.clear()
    FAILS.clear()
    EVIDENCE.clear()
    TRIES.clear()


def hold_sync(key: str, seconds: float = 0.01) -> dict:
    """Sync (worker thread): counts itself in flight while it sleeps."""
    with _SYNC_LOCK:
        SYNC_FLIGHT["now"] += 1
        SYNC_FLIGHT["calls"] += 1
        SYNC_FLIGHT["max"] = max(SYNC_FLIGHT["max"], SYNC_FLIGHT["now"])
    try:
        time.sleep(seconds)
    finally:
        with _SYNC_LOCK:
            SYNC_FLIGHT["now"] -= 1
    return {"key": key}


async def stamp(key: str) -> dict:
    """Async: records the (mock) time it started."""
    STAMPS.append(trio.current_time())
    return {"key": key}


async def flaky_async(key: str, failures: int = 0, hang: bool = False) -> dict:
    """Async: fails (raises, or hangs past any timeout when ``hang``) ``failures`` times per key,
    then succeeds."""
    TRIES.setdefault(key, []).append(trio.current_time())
    left = FAILS.setdefault(key, failures)
    if left > 0:
        FAILS[key] = left - 1
        if hang:
            await trio.sleep_forever()
        raise RuntimeError(f"planned failure of {key}")
    return {"key": key}


async def late_result(seconds: float) -> dict:
    """Async: moves the mock clock past its own deadline without a checkpoint, then returns."""
    trio.lowlevel.current_clock().jump(seconds)
    return {"late": True}


async def hang_async() -> dict:
    await trio.sleep_forever()
    return {}


def pid_sleep(path: str, seconds: float, ignore_term: bool = False) -> dict:
    """Writes its process id to ``path``, then sleeps (optionally deaf to SIGTERM)."""
    import signal

    if ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(path, "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(seconds)
    return {"pid": os.getpid()}


def whoami(**kwargs) -> dict:
    """The process it runs in, and what it received."""
    return {"pid": os.getpid(), "received": kwargs}


def exit_now(code: int = 3) -> dict:
    os._exit(code)


def secret_raise(user: str, password: str) -> dict:
    """Raises an exception quoting its secret argument in several spellings."""
    raise ValueError(f"login failed for {user} with password {password} (repr {password!r}; args {dict(user=user, password=password)})")


def secret_result(user: str, password: str) -> dict:
    """Returns its secret in the result (a redacted output field)."""
    return {"user": user, "token": password}


async def asyncio_marked(seconds: float = 0.0):
    """Runs on asyncio because it says so (no asyncio name in its code)."""
    import sniffio

    return {"library": sniffio.current_async_library()}


asyncio_marked.__toolloop_runtime__ = "asyncio"


async def asyncio_library() -> dict:
    import sniffio

    await asyncio.sleep(0)
    return {"library": sniffio.current_async_library()}


async def trio_library() -> dict:
    import sniffio

    await trio.sleep(0)
    return {"library": sniffio.current_async_library()}


def route_sync(target: str, args: dict, catch: bool = False) -> dict:
    """Sync router: dispatches one call and returns its result."""
    from toolloop_cli import DispatchError, dispatch

    try:
        return {"child": dispatch(target, args)}
    except DispatchError as exc:
        if not catch:
            raise
        return {"refused": str(exc), "receipt": (exc.receipt or {}).get("status")}


async def _route_awaited(target: str, args: dict, catch: bool) -> dict:
    from toolloop_cli import DispatchError, dispatch

    try:
        return {"child": await dispatch(target, args)}
    except DispatchError as exc:
        if not catch:
            raise
        return {"refused": str(exc), "receipt": (exc.receipt or {}).get("status")}


async def route_trio(target: str, args: dict, catch: bool = False) -> dict:
    return await _route_awaited(target, args, catch)


async def route_asyncio(target: str, args: dict, catch: bool = False) -> dict:
    await asyncio.sleep(0)  # names asyncio: runs on the asyncio loop
    return await _route_awaited(target, args, catch)


async def route_trio_thread(target: str, args: dict) -> dict:
    """Async (trio) router that dispatches from a worker thread it starts itself."""
    from toolloop_cli import dispatch

    return {"child": await trio.to_thread.run_sync(lambda: dispatch(target, args))}


def route_many(target: str, items: list) -> dict:
    """Sync router: dispatches one call per item, in order."""
    from toolloop_cli import dispatch

    return {"children": [dispatch(target, a) for a in items]}


def evidence_collect(record: dict) -> None:
    EVIDENCE.append(record)


def evidence_fail(record: dict) -> None:
    raise RuntimeError(f"evidence store down for {record['args']}")


def secret_digest(user: str, password: str) -> dict:
    """Proves it got the real secret without returning it: its SHA-256."""
    import hashlib

    return {"user": user, "sha256": hashlib.sha256(password.encode()).hexdigest()}


def evidence_to_file(record: dict) -> None:
    """Evidence hook for command-line runs: appends each record to $TOOLLOOP_TEST_EVIDENCE."""
    import json

    with open(os.environ["TOOLLOOP_TEST_EVIDENCE"], "a") as fh:
        fh.write(json.dumps(record) + "\n")


# --- tools that raise anything, fork, or stop the loop they run on (tests/test_tool_faults.py,
# tests/test_redaction_raised.py) --------------------------------------------------------------


class AppInterrupt(BaseException):
    """An App's own BaseException subclass."""


RAISABLE = {"SystemExit": SystemExit, "KeyboardInterrupt": KeyboardInterrupt, "GeneratorExit": GeneratorExit,
            "BaseException": BaseException, "AppInterrupt": AppInterrupt, "ValueError": ValueError}


def raise_any(kind: str, message: str = "", with_pid: bool = False) -> dict:
    """Sync: raises the named exception class (BaseException subclasses included)."""
    raise RAISABLE[kind](message + (f" in {os.getpid()}" if with_pid else ""))


async def raise_any_trio(kind: str, message: str = "") -> dict:
    await trio.sleep(0)
    raise RAISABLE[kind](message)


async def raise_any_asyncio(kind: str, message: str = "") -> dict:
    await asyncio.sleep(0)
    raise RAISABLE[kind](message)


def _login_failure(kind: str, user: str, password: str) -> BaseException:
    return RAISABLE[kind](f"login failed for {user} with password {password} (repr {password!r})")


def secret_exit(user: str, password: str, kind: str = "SystemExit") -> dict:
    """Sync: raises a BaseException quoting its secret argument."""
    raise _login_failure(kind, user, password)


async def secret_exit_trio(user: str, password: str, kind: str = "SystemExit") -> dict:
    await trio.sleep(0)
    raise _login_failure(kind, user, password)


async def secret_exit_asyncio(user: str, password: str, kind: str = "SystemExit") -> dict:
    await asyncio.sleep(0)
    raise _login_failure(kind, user, password)


async def asyncio_exit_in_callback(code: int = 3) -> dict:
    """Schedules ``sys.exit`` as a plain callback on the asyncio loop it runs on, then returns."""
    asyncio.get_running_loop().call_soon(sys.exit, code)
    return {"scheduled": True}


def fork_sleep(path: str, seconds: float, wait: bool = True) -> dict:
    """Forks a child that sleeps ``seconds``, writes the child's process id to ``path``, then sleeps
    as long itself (or returns at once when not ``wait``)."""
    child = os.fork()
    if child == 0:
        try:
            time.sleep(seconds)
        finally:
            os._exit(0)
    with open(path, "w") as fh:
        fh.write(str(child))
    if wait:
        time.sleep(seconds)
    return {"child": child}


async def sigint_self() -> dict:
    """Async (trio): the process receives SIGINT while this tool runs."""
    import signal

    signal.raise_signal(signal.SIGINT)
    await trio.sleep(0)
    return {}


def _child_paused(run_id: str) -> BaseException:
    from toolloop_cli.engine.child_runs import ChildPaused

    return ChildPaused(run_id, None)


def child_pauses(run_id: str) -> dict:
    """Sync: raises what a router's dispatch() raises when the child run it started pauses."""
    raise _child_paused(run_id)


async def child_pauses_trio(run_id: str) -> dict:
    await trio.sleep(0)
    raise _child_paused(run_id)


async def child_pauses_asyncio(run_id: str) -> dict:
    await asyncio.sleep(0)
    raise _child_paused(run_id)


def unavailable(**kwargs) -> dict:
    """Fails the same way whatever it is given (the convergence rules' same_error)."""
    raise RuntimeError("service unavailable")


def nothing(**kwargs) -> dict:
    """Finds nothing, whatever it is given (the convergence rules' no_progress)."""
    return {}


def same(**kwargs) -> dict:
    """The same result whatever it is given (the convergence rules' no_progress)."""
    return {"items": [1, 2]}
