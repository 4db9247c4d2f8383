"""Worker processes for ``isolation: process``.

Each worker is ``python -m toolloop_cli.engine.procpool``, in a process group of its own: it
reads requests and writes replies as length-prefixed pickles on its standard input and output
(which it moves to private file descriptors first, so a tool that prints writes to standard
error and cannot corrupt the channel). It resolves ``module:attr`` itself with the App root on
``sys.path``, so nothing unpicklable crosses over, and keeps resolved callables (and their
imports) warm between calls. Whatever a callable raises, ``BaseException`` included, is a reply:
a worker prints nothing of its own and serves on.

The parent side keeps idle workers per App root for one ``trio.run`` and reuses them. A call's
module is imported in its worker before the call's deadline starts (``load``, bounded by
``IMPORT_LIMIT_S``). A call that is cancelled (its timeout, a halt, Ctrl-C) ends its worker's
whole process group, so processes the callable forked end too: SIGTERM, a grace period, then
SIGKILL, and the worker is reaped before the call returns. Idle workers are closed (with what
they started) when the run ends.

The child half imports the standard library only: a worker starts in tens of milliseconds.
``pickle`` is imported by the functions that use it: every run imports this module (for
``WorkerFailure``, which every executor's ``ToolRaised`` is), few run a worker.
"""

from __future__ import annotations

import os
import signal
import struct
import sys
from typing import Any, Hashable, Protocol

TERM_GRACE_S = 0.5  # between SIGTERM and SIGKILL
IMPORT_LIMIT_S = 60.0  # importing a callable's module in a worker, before the call's deadline
_HEADER = struct.Struct("!Q")
_SLACK = 4096  # pickle framing around a value that is at the output cap


class WorkerFailure(Exception):
    """A call failed where it ran: ``kind`` says how (``worker_died``, ``import_timeout``; as
    ``executors.failure.ToolRaised``, the type name of what the callable raised)."""

    def __init__(self, kind: str, message: str):
        self.kind = kind
        super().__init__(message)


class WorkerOutputRejected(Exception):
    """The worker could not send the result back: too large (``kind`` output_too_large) or not
    picklable (``kind`` not_json)."""

    def __init__(self, kind: str, message: str):
        self.kind = kind
        super().__init__(message)


# --------------------------------------------------------------------------- the worker (child)


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _reply(value: Any, cap: int | None) -> bytes:
    import pickle

    if cap is not None and isinstance(value, (str, bytes)) and len(value) > cap:
        # cheap check first: no copy of a huge string just to refuse it
        return pickle.dumps(("rejected", "output_too_large", len(value)))
    try:
        data = pickle.dumps(("ok", value), protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException as exc:  # noqa: BLE001 - any pickling failure of an App value
        return pickle.dumps(("rejected", "not_json", _described(exc)))
    if cap is not None and len(data) > cap + _SLACK:
        return pickle.dumps(("rejected", "output_too_large", len(data)))
    return data


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except BaseException:  # noqa: BLE001 - an App's __str__ may raise anything
        return ""


def _described(exc: BaseException) -> str:
    text = _text(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _failed(exc: BaseException) -> bytes:
    """The reply for anything App code raised: its kind and message, never a traceback."""
    import pickle

    return pickle.dumps(("error", type(exc).__name__, _text(exc) or type(exc).__name__))


def _load(resolved: dict, ref: str, app_root: str) -> bytes:
    """Import the module of ``ref`` and resolve it (kept for later calls). An import that raises
    is an error reply with that exception's kind."""
    import importlib
    import pickle

    from toolloop_cli.contract.callables import ensure_on_path, resolve

    if (ref, app_root) in resolved:
        return pickle.dumps(("ok", None))
    module = ref.split(":")[0]
    ensure_on_path(app_root)
    try:
        importlib.import_module(module)
    except BaseException as exc:  # noqa: BLE001 - App code at import time may raise anything
        where = ""
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        if tb is not None:
            where = f" (at {tb.tb_frame.f_code.co_filename}:{tb.tb_lineno})"
        text = _text(exc)
        return pickle.dumps(("error", type(exc).__name__,
                             f"importing module '{module}' failed: {text or type(exc).__name__}{where}"))
    try:
        r = resolve(ref, app_root)
    except BaseException as exc:  # noqa: BLE001 - an App's module attributes may raise anything
        return _failed(exc)
    if r.fn is None:
        return pickle.dumps(("error", "RuntimeError", r.message))
    resolved[(ref, app_root)] = r.fn
    return pickle.dumps(("ok", None))


def _call(resolved: dict, ref: str, app_root: str, args: dict, cap: int | None, ident: tuple | None = None) -> bytes:
    fn = resolved.get((ref, app_root))
    if fn is None:  # not loaded first: load now
        loaded = _load(resolved, ref, app_root)
        fn = resolved.get((ref, app_root))
        if fn is None:
            return loaded
    token = None
    if ident is not None:  # current_call() inside the callable: the call's identity, sent with it
        from .identity import CallIdentity, set_current

        token = set_current(CallIdentity(*ident))
    try:
        return _reply(fn(**args), cap)
    except BaseException as exc:  # noqa: BLE001 - App failures, whatever they are, become replies
        return _failed(exc)
    finally:
        if token is not None:
            from .identity import reset_current

            reset_current(token)


def _serve(requests: int, replies: int) -> None:
    import pickle

    resolved: dict[tuple[str, str], Any] = {}
    while True:
        header = _read_exact(requests, _HEADER.size)
        if header is None:
            return
        body = _read_exact(requests, _HEADER.unpack(header)[0])
        if body is None:
            return
        request = pickle.loads(body)
        if request[0] == "load":
            data = _load(resolved, *request[1:])
        else:
            data = _call(resolved, *request[1:])
        _write_all(replies, _HEADER.pack(len(data)) + data)


def worker_main() -> None:
    """Serve requests until standard input closes."""
    requests, replies = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # a tool's prints go to standard error
    os.close(devnull)
    # the parent decides what stops (it sends TERM); a worker has its own session, so a terminal's
    # Ctrl-C does not reach it, and a SIGINT sent to it anyway is ignored
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from toolloop_cli._paths import forget_start_folder

    forget_start_folder()  # callables resolve as in the parent: from app_root, not the current folder
    try:
        _serve(requests, replies)
    except OSError:
        pass  # the parent went away: nothing left to answer


# ---------------------------------------------------------------------------- the pool (parent)


def _child_env() -> dict[str, str]:
    # the worker must import this package even when it is not installed (a source checkout)
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


class Worker:
    """One worker process (the leader of its own process group) and its two pipes."""

    def __init__(self, proc: Any, app_root: str):
        self.proc = proc
        self.app_root = app_root
        self.key: Any = app_root  # which idle workers it joins when released (see ProcessPool.acquire)
        self.loaded: set[str] = set()  # callables this worker has imported and resolved
        self._buf = bytearray()

    @property
    def pid(self) -> int:
        return int(self.proc.pid)

    async def _read_exact(self, n: int) -> bytes:
        buf = self._buf
        while len(buf) < n:
            chunk = await self.proc.stdout.receive_some(max(65536, min(n - len(buf), 1 << 22)))
            if not chunk:
                code = await self.proc.wait()
                raise WorkerFailure("worker_died", f"the worker process ended (exit code {code}) before replying")
            buf += chunk
        out = bytes(buf[:n])
        del buf[:n]
        return out

    async def _exchange(self, request: tuple) -> tuple:
        import pickle

        import trio

        body = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            await self.proc.stdin.send_all(_HEADER.pack(len(body)) + body)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            raise WorkerFailure("worker_died", "the worker process stopped reading requests") from None
        (n,) = _HEADER.unpack(await self._read_exact(_HEADER.size))
        return pickle.loads(await self._read_exact(n))  # type: ignore[no-any-return]

    async def load(self, ref: str) -> None:
        """Import and resolve ``ref`` in the worker. Raises ``ToolRaised`` for a module that
        fails to import (with that failure's kind), ``WorkerFailure`` for a worker that died."""
        from .executors.failure import ToolRaised

        reply = await self._exchange(("load", ref, self.app_root))
        if reply[0] == "error":
            raise ToolRaised(reply[1], reply[2])
        self.loaded.add(ref)

    async def request(self, ref: str, args: dict, cap: int | None, ident: tuple | None = None) -> Any:
        from .executors.failure import ToolRaised

        reply = await self._exchange(("call", ref, self.app_root, args, cap, ident))
        if reply[0] == "ok":
            return reply[1]
        if reply[0] == "error":
            raise ToolRaised(reply[1], reply[2])
        kind, detail = reply[1], reply[2]
        if kind == "output_too_large":
            raise WorkerOutputRejected(kind, f"result too large: {detail} bytes exceed the output cap of {cap} bytes")
        raise WorkerOutputRejected(kind, f"result cannot leave the worker process: {detail}")

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass  # nothing of the group is left

    async def stop(self, grace: float = TERM_GRACE_S) -> None:
        """TERM to the worker's whole process group (the processes its callables forked too), up
        to ``grace`` seconds for the worker to end, then KILL to the group; always reaps the
        worker."""
        import trio

        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                await stream.aclose()
            except (OSError, trio.ClosedResourceError, trio.BrokenResourceError):
                pass
        self._signal_group(signal.SIGTERM)
        if self.proc.returncode is None:
            with trio.move_on_after(grace):
                await self.proc.wait()
        self._signal_group(signal.SIGKILL)
        await self.proc.wait()

    async def close(self, grace: float = TERM_GRACE_S) -> None:
        """An idle worker: closing its input ends it; what is left of its group is stopped."""
        import trio

        try:
            await self.proc.stdin.aclose()
        except (OSError, trio.ClosedResourceError, trio.BrokenResourceError):
            pass
        with trio.move_on_after(grace):
            await self.proc.wait()
        await self.stop(grace)


def _kept(worker: Worker, exc: BaseException) -> bool:
    """Whether a worker that failed a request can serve the next: the callable raised (or its
    result was refused) and the worker answered."""
    from .executors.failure import ToolRaised

    return isinstance(exc, (ToolRaised, WorkerOutputRejected)) and worker.proc.returncode is None


class Launcher(Protocol):
    """Starts workers some other way than a plain ``python -m toolloop_cli.engine.procpool`` (in a
    sandbox: ``executors/sandbox.py``). Workers of equal ``key`` (and App root) are interchangeable."""

    key: Hashable

    async def start(self, app_root: str) -> Worker:
        """A started worker; raises OSError when none can be started."""


async def _start_plain(app_root: str) -> Worker:
    import subprocess

    import trio

    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "toolloop_cli.engine.procpool"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_child_env(),
        start_new_session=True,  # a group of its own: a timeout ends what its callables fork
    )
    return Worker(proc, app_root)


class ProcessPool:
    """Warm workers for one ``trio.run``, per App root (and launcher)."""

    def __init__(self, grace: float = TERM_GRACE_S):
        self.grace = grace
        self.idle: dict[Any, list[Worker]] = {}
        self.started = 0  # workers spawned (for tests and the benchmark)
        self.closed = False

    async def acquire(self, app_root: str, launcher: Launcher | None = None) -> Worker:
        key: Any = app_root if launcher is None else (app_root, launcher.key)
        free = self.idle.get(key)
        while free:
            w = free.pop()
            if w.proc.returncode is None:
                return w
        worker = await (_start_plain(app_root) if launcher is None else launcher.start(app_root))
        worker.key = key
        self.started += 1
        return worker

    def release(self, worker: Worker) -> None:
        if self.closed:
            return
        self.idle.setdefault(worker.key, []).append(worker)

    async def ready(self, app_root: str, ref: str,
                    launcher: Launcher | None = None) -> tuple[Worker | None, WorkerFailure | None]:
        """A worker that has imported ``ref``'s module, or the failure a call of it must report:
        the import's own (``ToolRaised``), ``import_timeout`` past ``IMPORT_LIMIT_S``, or
        ``worker_died``. Raises OSError when no worker can be started."""
        import trio

        worker = await self.acquire(app_root, launcher)
        if ref in worker.loaded:
            return worker, None
        limit = IMPORT_LIMIT_S
        failure: WorkerFailure | None = None
        answered = False
        try:
            with trio.move_on_after(limit):
                try:
                    await worker.load(ref)
                except WorkerFailure as exc:
                    failure = exc
                answered = True
        finally:
            if answered and (failure is None or _kept(worker, failure)):
                if failure is not None:
                    self.release(worker)
            else:  # too slow, dead, or cancelled while importing
                with trio.CancelScope(shield=True):
                    await worker.stop(self.grace)
        if not answered:
            module = ref.split(":")[0]
            failure = WorkerFailure("import_timeout",
                                    f"importing module '{module}' in a worker process took longer than {limit:g}s")
        return (worker, None) if failure is None else (None, failure)

    async def call(self, worker: Worker, ref: str, args: dict, cap: int | None, ident: tuple | None = None) -> Any:
        """Run one call on ``worker``; a call that does not complete ends the worker."""
        import trio

        done = False
        try:
            value = await worker.request(ref, args, cap, ident)
            done = True
        except (WorkerFailure, WorkerOutputRejected) as exc:
            done = _kept(worker, exc)
            raise
        finally:
            if done:
                self.release(worker)
            else:
                with trio.CancelScope(shield=True):
                    await worker.stop(self.grace)
        return value

    async def aclose(self) -> None:
        import trio

        self.closed = True
        workers = [w for ws in self.idle.values() for w in ws]
        self.idle.clear()
        async with trio.open_nursery() as nursery:
            for w in workers:
                nursery.start_soon(w.close, self.grace)


_POOL: Any = None


def current_pool() -> ProcessPool:
    """The pool of the running ``trio.run``, made on first use and closed when the run ends."""
    import trio

    global _POOL
    if _POOL is None:
        _POOL = trio.lowlevel.RunVar("toolloop_process_pool")
    try:
        return _POOL.get()
    except LookupError:
        pool = ProcessPool()
        _POOL.set(pool)
        trio.lowlevel.spawn_system_task(_close_at_exit, pool, name="toolloop process pool")
        return pool


async def _close_at_exit(pool: ProcessPool) -> None:
    import trio

    try:
        await trio.sleep_forever()
    finally:
        with trio.CancelScope(shield=True):
            await pool.aclose()


if __name__ == "__main__":
    worker_main()
