"""Sync callables with ``isolation: sandbox``: the worker processes of ``isolation: process``
(``procpool``: the same protocol, warm reuse, the whole group killed at a timeout), started inside
a bubblewrap sandbox (``bwrap``).

A sandboxed worker gets new user, PID, IPC, UTS, cgroup and network namespaces (the network one
unless ``network: host``), no capabilities, a read-only view of the file system with a private
``/tmp`` and the tool's ``writable`` folders bound writable, and an environment of ``PATH``,
``HOME`` (``/tmp``) and the names in ``sandbox.env`` only: the values are handed to bwrap as its
environment, never on its command line (which every process can read). Folders the worker needs
that lie under ``/tmp`` (the App root, this package, the interpreter, the current folder) are
bound back read-only.

The worker talks to the run over the standard input and output pipes bwrap passes on, as a
plain worker does. Because the sandbox is a PID namespace, killing the worker's process group
is not where it ends: a process the callable started in a session of its own is still inside.
So the sandbox's first process (its PID 1, whose end ends every process in the namespace) is
read from bwrap's ``--info-fd`` at start, killed with the worker, and waited for: when a timed
out call's receipt is written, nothing it started is left.

Where no sandbox can be made and the tool says ``required: false``, its workers are plain ones
(``contract/sandbox.py`` decides once per process, and receipts say so).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

from ...contract.compiled import ToolSpec
from ...contract.sandbox import Sandbox, availability, bwrap_args
from ..procpool import Worker
from .process import ProcessExecutor

START_LIMIT_S = 30.0  # bwrap reporting its sandbox's first process
GONE_LIMIT_S = 10.0  # the sandbox's processes ending after the kill (the kernel does it at once)

# the worker's first code: the environment trimmed to the names it was given (bwrap sets PWD, and
# Python coerces a C locale by setting LC_CTYPE), this package put on sys.path (the sandbox gets
# no PYTHONPATH), then the plain worker's loop
_BOOT = ("import os, sys\n"
         "keep = set(sys.argv[2:])\n"
         "for name in [n for n in os.environ if n not in keep]:\n"
         "    del os.environ[name]\n"
         "sys.path.insert(0, sys.argv[1])\n"
         "from toolloop_cli.engine.procpool import worker_main\n"
         "worker_main()\n")

# the folder holding the toolloop_cli package (a source checkout need not be installed)
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


class SandboxUnavailable(OSError):
    """A call of a tool whose required sandbox cannot be made here (admission refuses such plans;
    this holds for paths that do not pass through it again, such as a resumed run)."""


class SandboxExecutor(ProcessExecutor):
    """``fn(**args)`` in a sandboxed worker process of the run's pool."""

    name = "sandbox"

    def launcher(self, tool: ToolSpec) -> Any:
        sandbox = tool.sandbox
        bwrap, why = availability()
        if sandbox is not None and bwrap is not None:
            return BwrapLauncher(bwrap, sandbox)
        if sandbox is None or sandbox.required:
            raise SandboxUnavailable(f"tool '{tool.id}' needs a sandbox, and none can be made on this machine: {why}")
        return None  # required: false: a plain worker, and its receipts say isolation kind "none"


class SandboxedWorker(Worker):
    """A worker inside a sandbox, and a handle on the sandbox's first process."""

    def __init__(self, proc: Any, app_root: str, pidfd: int | None):
        super().__init__(proc, app_root)
        self.pidfd = pidfd
        self.answered = False  # a reply came: the sandbox was made

    async def _read_exact(self, n: int) -> bytes:
        from ..procpool import WorkerFailure

        try:
            data = await super()._read_exact(n)
        except WorkerFailure as exc:
            if self.answered:
                raise
            # bwrap makes the mounts after it started: a writable folder removed since the
            # registry was checked ends it here, before the worker ever answered
            raise WorkerFailure(exc.kind, f"{exc}; bwrap may not have made the sandbox (its message is on"
                                          " standard error)") from None
        self.answered = True
        return data

    async def stop(self, grace: float | None = None) -> None:
        import trio

        from ..procpool import TERM_GRACE_S

        try:
            await super().stop(TERM_GRACE_S if grace is None else grace)
        finally:
            with trio.CancelScope(shield=True):
                await self._sandbox_gone()

    async def _sandbox_gone(self) -> None:
        """Kill the sandbox's PID 1 and wait until it has ended: the kernel ends every other
        process of the namespace before that (a callable's children in sessions of their own too)."""
        import trio

        pidfd, self.pidfd = self.pidfd, None
        if pidfd is None:
            return
        try:
            try:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass  # ended already; the descriptor still says when it is gone
            with trio.move_on_after(GONE_LIMIT_S):
                await trio.lowlevel.wait_readable(pidfd)
        finally:
            os.close(pidfd)


class BwrapLauncher:
    """Starts workers inside one tool's sandbox; tools with the same sandbox share warm workers."""

    def __init__(self, bwrap: str, sandbox: Sandbox):
        self.bwrap = bwrap
        self.sandbox = sandbox
        self.key = ("bwrap", sandbox.network, sandbox.paths, sandbox.env)

    def environment(self) -> dict[str, str]:
        env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": "/tmp"}
        env.update({name: os.environ[name] for name in self.sandbox.env if name in os.environ})
        return env

    def argv(self, app_root: str, info_fd: int) -> list[str]:
        cwd = _cwd(app_root)
        args = bwrap_args(self.bwrap, self.sandbox.network)
        for path in _under_tmp([app_root, _PACKAGE_PARENT, sys.prefix, sys.base_prefix,
                                os.path.dirname(sys.executable), cwd]):
            args += ["--ro-bind", path, path]
        for path in self.sandbox.paths:
            args += ["--bind", path, path]
        return args + ["--chdir", cwd, "--info-fd", str(info_fd), "--", sys.executable, "-c", _BOOT,
                       _PACKAGE_PARENT, "PATH", "HOME", *self.sandbox.env]

    async def start(self, app_root: str) -> Worker:
        import trio

        read_end, write_end = os.pipe()
        info_stream = trio.lowlevel.FdStream(read_end)
        proc = None
        try:
            try:
                proc = _Process.start(self.argv(app_root, write_end), self.environment(), write_end)
            finally:
                os.close(write_end)
            info = b""
            with trio.move_on_after(START_LIMIT_S):
                while chunk := await info_stream.receive_some():
                    info += chunk
            pid = _first_pid(info)
        except BaseException:  # cancelled while bwrap starts: nothing is left behind
            if proc is not None:
                with trio.CancelScope(shield=True):
                    await Worker(proc, app_root).stop()
            raise
        finally:
            with trio.CancelScope(shield=True):
                await info_stream.aclose()
        if pid is None:  # bwrap said why on standard error
            with trio.CancelScope(shield=True):
                await Worker(proc, app_root).stop()
            raise OSError(f"bwrap could not make the sandbox (exit code {proc.returncode}); its message is on"
                          " standard error")
        try:
            pidfd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:
            pidfd = None  # it ended already: the worker's pipes say so at the first request
        return SandboxedWorker(proc, app_root, pidfd)


class _Process:
    """bwrap, started from the event loop's own thread, with what ``procpool.Worker`` uses of a
    process (``pid``, ``returncode``, ``stdin``, ``stdout``, ``wait()``).

    trio starts processes from a worker thread, and the parent-death signal that
    ``--die-with-parent`` arms follows the *thread* that started the process: trio retires idle
    threads after a few seconds, and the sandbox would be killed then, in the middle of a call.
    The event loop's thread lives as long as the run, and a killed toolloop takes it along."""

    def __init__(self, popen: Any, stdin: Any, stdout: Any):
        self.popen = popen
        self.pid = popen.pid
        self.stdin = stdin
        self.stdout = stdout

    @classmethod
    def start(cls, argv: list[str], env: dict[str, str], info_fd: int) -> _Process:
        import subprocess

        import trio

        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        try:
            # blocks the loop for the fork and exec of bwrap only (a few milliseconds, once per worker)
            popen = subprocess.Popen(argv, stdin=in_r, stdout=out_w, env=env, pass_fds=(info_fd,),
                                     start_new_session=True)  # a group of its own, as a plain worker's
        except BaseException:
            for fd in (in_w, out_r):
                os.close(fd)
            raise
        finally:
            os.close(in_r)
            os.close(out_w)
        return cls(popen, trio.lowlevel.FdStream(in_w), trio.lowlevel.FdStream(out_r))

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()  # type: ignore[no-any-return]

    async def wait(self) -> int:
        import trio

        if self.popen.poll() is None:
            pidfd = os.pidfd_open(self.pid)  # our own child, not reaped yet: no other process has its pid
            try:
                await trio.lowlevel.wait_readable(pidfd)
            finally:
                os.close(pidfd)
        return self.popen.wait()  # type: ignore[no-any-return]


def _first_pid(info: bytes) -> int | None:
    try:
        pid = json.loads(info)["child-pid"]
    except (ValueError, KeyError, TypeError):
        return None
    return pid if isinstance(pid, int) and pid > 0 else None


def _cwd(app_root: str) -> str:
    try:
        return os.getcwd()
    except OSError:  # the current folder was removed
        return app_root


def _under_tmp(paths: list[str]) -> list[str]:
    """The folders among ``paths`` that the sandbox's private /tmp would hide, outermost first."""
    found: list[str] = []
    for path in sorted({os.path.realpath(p) for p in paths}, key=len):
        # /tmp itself stays private (a worker started from /tmp runs in the empty one)
        if path.startswith("/tmp/") and os.path.isdir(path) and not any(
                path == f or path.startswith(f + "/") for f in found):
            found.append(path)
    return found


def make(run: Any) -> SandboxExecutor:
    return SandboxExecutor(run.app_root, run.output_cap_bytes)
