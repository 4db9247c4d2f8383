"""Worker processes for ``isolation: process`` (SPEC 5.3).

Each worker is ``python -m toolloop_cli.engine.procpool``: it reads requests and writes replies
as length-prefixed pickles on its standard input and output (which it moves to private file
descriptors first, so a tool that prints writes to standard error and cannot corrupt the
channel). It resolves ``module:attr`` itself with the App root on ``sys.path``, so nothing
unpicklable crosses over, and keeps resolved callables (and their imports) warm between calls.

The parent side keeps idle workers per App root for one ``trio.run`` and reuses them. A call
that is cancelled (its timeout, a halt, Ctrl-C) ends its worker: SIGTERM, a grace period, then
SIGKILL, and the worker is reaped before the call returns, so no process outlives its call.
Idle workers are closed when the run ends.

The child half imports the standard library only: a worker starts in tens of milliseconds.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import sys
from typing import Any

TERM_GRACE_S = 0.5  # between SIGTERM and SIGKILL
_HEADER = struct.Struct("!Q")
_SLACK = 4096  # pickle framing around a value that is at the output cap


class WorkerFailure(Exception):
    """The callable raised in the worker; ``kind`` is its exception type's name."""

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
    if cap is not None and isinstance(value, (str, bytes)) and len(value) > cap:
        # cheap check first: no copy of a huge string just to refuse it
        return pickle.dumps(("rejected", "output_too_large", len(value)))
    try:
        data = pickle.dumps(("ok", value), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - any pickling failure of an App value
        return pickle.dumps(("rejected", "not_json", f"{type(exc).__name__}: {exc}"))
    if cap is not None and len(data) > cap + _SLACK:
        return pickle.dumps(("rejected", "output_too_large", len(data)))
    return data


def worker_main() -> None:
    """Serve requests until standard input closes."""
    requests, replies = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # a tool's prints go to standard error
    os.close(devnull)
    # Ctrl-C reaches the whole process group; the parent decides what stops (it sends TERM)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from toolloop_cli.contract.callables import resolve

    resolved: dict[tuple[str, str], Any] = {}
    while True:
        header = _read_exact(requests, _HEADER.size)
        if header is None:
            return
        body = _read_exact(requests, _HEADER.unpack(header)[0])
        if body is None:
            return
        ref, app_root, args, cap = pickle.loads(body)
        try:
            fn = resolved.get((ref, app_root))
            if fn is None:
                r = resolve(ref, app_root)
                if r.fn is None:
                    raise RuntimeError(r.message)
                fn = resolved[(ref, app_root)] = r.fn
            data = _reply(fn(**args), cap)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - App failures become replies
            data = pickle.dumps(("error", type(exc).__name__, str(exc) or type(exc).__name__))
        _write_all(replies, _HEADER.pack(len(data)) + data)


# ---------------------------------------------------------------------------- the pool (parent)


def _child_env() -> dict[str, str]:
    # the worker must import this package even when it is not installed (a source checkout)
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


class Worker:
    """One worker process and its two pipes."""

    def __init__(self, proc: Any, app_root: str):
        self.proc = proc
        self.app_root = app_root
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

    async def request(self, ref: str, args: dict, cap: int | None) -> Any:
        body = pickle.dumps((ref, self.app_root, args, cap), protocol=pickle.HIGHEST_PROTOCOL)
        await self.proc.stdin.send_all(_HEADER.pack(len(body)) + body)
        (n,) = _HEADER.unpack(await self._read_exact(_HEADER.size))
        reply = pickle.loads(await self._read_exact(n))
        if reply[0] == "ok":
            return reply[1]
        if reply[0] == "error":
            raise WorkerFailure(reply[1], reply[2])
        kind, detail = reply[1], reply[2]
        if kind == "output_too_large":
            raise WorkerOutputRejected(kind, f"result too large: {detail} bytes exceed the output cap of {cap} bytes")
        raise WorkerOutputRejected(kind, f"result cannot leave the worker process: {detail}")

    async def stop(self, grace: float = TERM_GRACE_S) -> None:
        """TERM, up to ``grace`` seconds, then KILL; always reaps the process."""
        import trio

        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                await stream.aclose()
            except (OSError, trio.ClosedResourceError, trio.BrokenResourceError):
                pass
        if self.proc.returncode is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
            with trio.move_on_after(grace):
                await self.proc.wait()
        if self.proc.returncode is None:
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass
            await self.proc.wait()

    async def close(self, grace: float = TERM_GRACE_S) -> None:
        """An idle worker: closing its input ends it; TERM/KILL only if it lingers."""
        import trio

        try:
            await self.proc.stdin.aclose()
        except (OSError, trio.ClosedResourceError, trio.BrokenResourceError):
            pass
        with trio.move_on_after(grace):
            await self.proc.wait()
        await self.stop(grace)


class ProcessPool:
    """Warm workers for one ``trio.run``, per App root."""

    def __init__(self, grace: float = TERM_GRACE_S):
        self.grace = grace
        self.idle: dict[str, list[Worker]] = {}
        self.started = 0  # workers spawned (for tests and the benchmark)
        self.closed = False

    async def acquire(self, app_root: str) -> Worker:
        free = self.idle.get(app_root)
        while free:
            w = free.pop()
            if w.proc.returncode is None:
                return w
        import subprocess

        import trio

        proc = await trio.lowlevel.open_process(
            [sys.executable, "-m", "toolloop_cli.engine.procpool"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_child_env(),
        )
        self.started += 1
        return Worker(proc, app_root)

    def release(self, worker: Worker) -> None:
        if self.closed:
            return
        self.idle.setdefault(worker.app_root, []).append(worker)

    async def call(self, worker: Worker, ref: str, args: dict, cap: int | None) -> Any:
        """Run one call on ``worker``; a call that does not complete ends the worker."""
        import trio

        done = False
        try:
            value = await worker.request(ref, args, cap)
            done = True
        except (WorkerFailure, WorkerOutputRejected):
            done = worker.proc.returncode is None
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
