"""Calls as Ray tasks (``--executor ray``).

Each call of a sync or asyncio callable is one Ray task with Ray's own retries off, so a call runs
once per attempt and the run's retry policy, limits, cache and journal stay in this process (the
head). The task is a generator: it imports the callable, reports that it started, calls it and
reports its reply. ``prepare`` submits the task and waits for the start report, so the time a task
waits for a free CPU, a worker process to start (every call of an ``isolation: process`` tool gets
its own, through ``max_calls=1``) and the App's module to import is never the call's; the deadline
covers the call itself, as it does for a local worker process. At the deadline (or a halt, or a
signal) the task is cancelled with force, which kills its worker process, and the call waits until
Ray reports the task ended, so nothing is left running (``abandoned: false``).

The task reports the callable's failure as data (its type's name and message), so receipts carry
the same error as a local call; a result goes back as the value itself and is checked in the head as
any other. A worker that goes away before it replies (killed, out of memory, its node lost) raises
``WorkerLost``, which makes an at-most-once write ``interrupted`` (``engine/call.py``).

The App root is shipped with the run's Ray job as its ``working_dir``; the task function itself is
pickled by value, so the workers need Ray and the App's own dependencies, not toolloop.

The start report and the reply reach the event loop through callbacks that Ray's own thread makes
as each arrives, so no thread waits per call (with a Ray too old to give a task's items ahead, one
thread per call in flight waits on Ray's blocking iterator, bounded by ``max_concurrency``).

Joining a cluster is bounded (``TOOLLOOP_RAY_CONNECT_TIMEOUT_S``, 30 s by default) and never deaf
to signals: ``ray.init`` runs in a thread of its own (``_Owner``) while the caller waits where
Ctrl-C and SIGTERM arrive. Before it, the address Ray will dial (Ray replaces a loopback host with
this machine's own address) is checked, so a cluster that is not there is a quick, clear error.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import os
import signal
import socket
import sys
import threading
from contextlib import asynccontextmanager, contextmanager
from typing import Any, AsyncIterator, Callable, Iterator

import outcome
import trio

from ..._text import excerpt
from ...contract.compiled import ToolSpec
from ...errors import RunError, UsageError
from . import Executor, WorkerLost

INSTALL_LINE = "pip install 'toolloop-cli[ray]'"
#: how long a cancelled call waits for Ray to report that its task ended
STOP_WAIT_S = 10.0
#: how long reaching a cluster's address may take before the run gives up
CONNECT_CHECK_S = 5.0
#: how long joining a cluster (``ray.init``) may take, unless TOOLLOOP_RAY_CONNECT_TIMEOUT_S says
CONNECT_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_ENV = "TOOLLOOP_RAY_CONNECT_TIMEOUT_S"
#: never shipped to the workers with the App root
SHIP_EXCLUDES = [".git", ".hg", ".venv", "venv", ".toolloop", "__pycache__", "*.pyc", "node_modules",
                 ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox"]


def import_ray() -> Any:
    """The ``ray`` module, or a usage error that says how to install it."""
    try:
        import ray
    except ImportError:
        raise UsageError(f"--executor ray needs Ray, which is not installed here: {INSTALL_LINE}") from None
    return ray


# ------------------------------------------------------------------------- in the Ray worker
# Pickled by value (see RayConnection): these use the standard library only.


def _reply(value: Any, cap: int) -> tuple[Any, ...]:
    """``("ok", value)``, or ``("too_large", size)`` when the value's strings alone pass the output
    cap (the same lower bound the head uses), so a huge result never crosses the cluster."""
    size = None
    if isinstance(value, str):
        size = len(value) + 2 if len(value) > cap else None
    elif isinstance(value, (dict, list)):
        n = 0
        for v in value.values() if isinstance(value, dict) else value:
            if isinstance(v, str):
                n += len(v)
                if n > cap:
                    size = n
                    break
    return ("ok", value) if size is None else ("too_large", size)


def toolloop_call(call: tuple[Any, ...]) -> Any:
    """One call in a Ray worker: import the callable, report the start (the process id), call it,
    report the reply. Never raises for the App's failures. ``current_call()`` gives ``identity``
    where the worker can import toolloop (an App that uses it has it installed). ``call`` is
    ``(ref, args, is_async, cap, identity)`` as one argument: Ray serialises each argument of a
    task on its own, on the head and again in the worker (one tuple costs about 5 % less CPU per
    task than five arguments)."""
    import importlib
    import os

    ref, args, is_async, cap, identity = call
    try:
        module, _, path = ref.partition(":")
        fn: Any = importlib.import_module(module)
        for part in path.split("."):
            fn = getattr(fn, part)
    except BaseException as exc:  # noqa: BLE001 - the App's import, on a worker that may lack a dependency
        yield os.getpid()
        yield ("error", type(exc).__name__, f"cannot import '{ref}' in the Ray worker: {exc}")
        return
    token: contextvars.Token[Any] | None = None
    reset: Callable[[contextvars.Token[Any]], None] | None = None
    if identity is not None:
        try:  # a worker without toolloop (or another version of it) runs the call all the same
            from toolloop_cli.engine import identity as current

            token, reset = current.set_current(current.CallIdentity(**identity)), current.reset_current
        except Exception:  # noqa: BLE001
            token = reset = None
    yield os.getpid()
    try:
        value = fn(**args)
        if is_async:
            import asyncio

            value = asyncio.run(value)
    except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt are App failures too
        try:
            message = str(exc)
        except BaseException:  # noqa: BLE001 - an App's __str__ may raise anything
            message = ""
        yield ("error", type(exc).__name__, message or type(exc).__name__)
        return
    finally:
        if token is not None and reset is not None:
            try:
                reset(token)
            except ValueError:  # resumed in another context: nothing of ours to restore there
                pass
    yield _reply(value, cap)


def toolloop_call_isolated(call: tuple[Any, ...]) -> Any:
    """``toolloop_call`` in a worker process of its own (``isolation: process``)."""
    yield from toolloop_call(call)


# ------------------------------------------------------------------------------- in the head


def _first_line(text: Any) -> str:
    """The first line of what Ray said (its messages run over many lines, with tracebacks). Not
    clipped here: a receipt's message is cut only after its redacted values are hidden."""
    return next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _is_host_port(address: str) -> bool:
    host, sep, port = address.rpartition(":")
    return bool(sep and host and port.isdigit())


def _dialled(address: str) -> str:
    """The address Ray itself dials for ``host:port``: Ray replaces a loopback host (127.0.0.1,
    localhost) with this machine's own address, so a cluster that listens on loopback alone is
    reached on loopback and still cannot be joined."""
    if not _is_host_port(address):
        return address
    try:
        from ray._private.services import canonicalize_bootstrap_address

        return canonicalize_bootstrap_address(address) or address
    except Exception:  # noqa: BLE001 - Ray's own helper moved or failed: probe what was given
        return address


def _reachable(address: str) -> str | None:
    """Why ``host:port`` cannot be reached, or None. Ray itself would retry for minutes."""
    if not _is_host_port(address):
        return None  # "auto" or another form Ray understands: Ray says what is wrong with it
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_CHECK_S):
            return None
    except OSError as exc:
        return exc.strerror or str(exc) or type(exc).__name__


def connect_timeout() -> float:
    """Seconds joining a cluster may take: TOOLLOOP_RAY_CONNECT_TIMEOUT_S, else 30."""
    raw = os.environ.get(CONNECT_TIMEOUT_ENV, "").strip()
    if not raw:
        return CONNECT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise UsageError(f"{CONNECT_TIMEOUT_ENV}={excerpt(raw)} is not a number of seconds above 0")
    return value


class _ConnectTimedOut(Exception):
    pass


class _DropThreadWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("SIGTERM handler is not set")


@contextmanager
def _quiet_thread_warning() -> Iterator[None]:
    """``ray.init`` outside the main thread warns that it set no SIGTERM handler: toolloop keeps
    its own, and its standard error carries its own lines."""
    logger = logging.getLogger("ray._private.worker")
    drop = _DropThreadWarning()
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGINT and SIGTERM raise KeyboardInterrupt here (exit 130) for the length of the block,
    whatever handler the command holds them with (main thread only: elsewhere signals are not
    this thread's to take). The command's own handler only counts a signal, and Ray's connect,
    waited for here, would go on for as long as Ray waits."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(_sig: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class _Owner:
    """The thread that calls ``ray.init`` and, when told, ``ray.shutdown``.

    Ray's connect blocks in native code that lets no signal through, so it runs here while the
    caller waits where Ctrl-C and SIGTERM still arrive, at most the connect deadline; a connect
    given up on is left behind (the process is about to end). The thread lives as long as the
    connection: the processes of a local Ray die with the thread that started them."""

    def __init__(self, ray: Any, kwargs: dict[str, Any]):
        self.ray = ray
        self.kwargs = kwargs
        self.error: BaseException | None = None
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.stopped = threading.Event()
        threading.Thread(target=self._main, name="toolloop ray", daemon=True).start()

    def _main(self) -> None:
        try:
            with _quiet_thread_warning():
                self.ray.init(**self.kwargs)
        except BaseException as exc:  # noqa: BLE001 - raised again in the waiting thread
            self.error = exc
            self.stopped.set()
            return
        finally:
            self.ready.set()
        self.stop.wait()
        try:
            self.ray.shutdown()
        finally:
            self.stopped.set()

    def wait_ready(self, deadline_s: float | None) -> None:
        with _sigterm_interrupts():
            if not self.ready.wait(deadline_s):
                raise _ConnectTimedOut()
        if self.error is not None:
            raise self.error

    def shutdown(self) -> None:
        self.stop.set()
        with _sigterm_interrupts():
            self.stopped.wait()


class RayConnection:
    """The run's Ray job: connected (or a local Ray started) when the run opens its executors,
    disconnected (or stopped) when it ends. A process already connected to Ray (a program that
    embeds toolloop) is used as it is and left connected; its job ships its own code."""

    def __init__(self, app_root: str, address: str | None):
        self.ray = import_ray()
        self.app_root = app_root
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        if self.address and self.address.startswith("ray://"):
            raise UsageError(f"--ray-address {excerpt(self.address)}: Ray Client addresses (ray://) are not supported;"
                             " give the cluster's address as HOST:PORT (port 6379 unless 'ray start' said otherwise)")
        self.depth = 0
        self._owner: _Owner | None = None  # set when this connection called ray.init (and so shuts down)
        # the task functions travel by value: the workers need no toolloop installed
        self.ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

    def where(self) -> str:
        return f"the Ray cluster at {excerpt(self.address)}" if self.address else "a local Ray"

    def open(self) -> None:
        """Connect, or start a local Ray; blocking (seconds for a local start). Ctrl-C and SIGTERM
        end it at any moment (KeyboardInterrupt, exit 130): the reachability check and Ray's own
        connect both wait on the network, where a signal the command only counted would be lost."""
        self.depth += 1
        if self.depth > 1:
            return
        try:
            with _sigterm_interrupts():
                self._connect()
        except KeyboardInterrupt:
            self.depth -= 1
            raise

    def _connect(self) -> None:
        ray = self.ray
        if ray.is_initialized():
            return
        kwargs: dict[str, Any] = {
            "runtime_env": {"working_dir": self.app_root, "excludes": SHIP_EXCLUDES},
            "logging_level": logging.ERROR, "log_to_driver": True,
        }
        deadline: float | None = None
        if self.address:
            deadline = connect_timeout()
            dialled = _dialled(self.address)
            problem = _reachable(dialled)
            if problem is not None:
                self.depth -= 1
                raise UsageError(f"cannot reach {self.where()}{self._via(dialled)}: {problem}; start one with"
                                 " 'ray start --head' or check --ray-address / RAY_ADDRESS"
                                 + self._loopback_hint(dialled))
            kwargs["address"] = self.address
        else:
            kwargs.update(address="local", include_dashboard=False)
        if os.environ.get("NO_COLOR") or not _is_terminal(sys.stderr):
            os.environ.setdefault("RAY_COLOR_PREFIX", "0")  # Ray colours the prefix of forwarded prints
        owner = _Owner(ray, kwargs)
        try:
            owner.wait_ready(deadline)
        except _ConnectTimedOut:
            self.depth -= 1
            dialled = _dialled(self.address or "")
            raise UsageError(f"cannot reach {self.where()}{self._via(dialled)}: no answer from Ray within"
                             f" {deadline:g}s; check that a Ray cluster (not another service) listens there,"
                             f" or allow longer with {CONNECT_TIMEOUT_ENV}") from None
        except Exception as exc:  # noqa: BLE001 - whatever Ray says, as one line
            self.depth -= 1
            hint = ""
            if self.address and not os.environ.get("RAY_AUTH_MODE"):
                hint = " (a cluster with token authentication also needs RAY_AUTH_MODE=token here)"
            error = UsageError if self.address else RunError  # an address that does not work is the flag's
            raise error(f"cannot start or reach {self.where()}: {excerpt(_first_line(exc), 300)}{hint}") from None
        self._owner = owner

    def _via(self, dialled: str) -> str:
        return f" (Ray dials {excerpt(dialled)})" if self.address and dialled != self.address else ""

    def _loopback_hint(self, dialled: str) -> str:
        if not self.address or dialled == self.address or _reachable(self.address) is not None:
            return ""  # the address given does not answer either
        return ("; Ray replaces a loopback address with this machine's own, so a cluster must listen there:"
                f" start it with 'ray start --head --node-ip-address={excerpt(dialled.rpartition(':')[0])}'")

    def close(self) -> None:
        """Disconnect (a local Ray started by ``open`` is stopped)."""
        self.depth -= 1
        owner, self._owner = self._owner, None
        if self.depth > 0 or owner is None:
            self._owner = owner
            return
        owner.shutdown()

    @asynccontextmanager
    async def opened(self) -> AsyncIterator[None]:
        """``open``/``close`` from inside the event loop (in a thread, unless already open)."""
        if self.depth:
            self.depth += 1
            try:
                yield
            finally:
                self.depth -= 1
            return
        await trio.to_thread.run_sync(self.open)
        try:
            yield
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self.close)


def _stream_refs(gen: Any) -> Any:
    """The refs of a call task's two items (its start report and its reply), without taking them
    from the stream, or None where this Ray cannot say them ahead (then a thread follows)."""
    peek = getattr(gen, "_get_next_ref_n", None)
    if peek is None:
        return None
    try:
        refs = peek(2)
    except Exception:  # noqa: BLE001 - another Ray's private helper: follow with a thread
        return None
    if len(refs) != 2 or not all(hasattr(r, "_on_completed") for r in refs):
        return None
    return refs


class _Task:
    """One call's Ray task. Its start report and its reply reach the event loop through callbacks
    Ray's own thread makes when each item arrives (one thread serves every call in flight); where
    this Ray cannot give the items' refs ahead, a thread per call waits on Ray's blocking
    iterator instead."""

    def __init__(self, ray: Any, gen: Any):
        self.ray = ray
        self.gen = gen
        self.started = trio.Event()
        self.done = trio.Event()
        self.pid: int | None = None  # the worker's process id, once started
        self.reply: Any = None  # outcome.Value of the reply tuple, or outcome.Error
        token = trio.lowlevel.current_trio_token()

        def soon(fn: Any, *args: Any) -> None:
            try:
                token.run_sync_soon(fn, *args)
            except trio.RunFinishedError:
                pass

        self._soon = soon
        refs = _stream_refs(gen)
        if refs is None:
            trio.lowlevel.start_thread_soon(self._follow, self._deliver, name="toolloop ray call")
            return
        # called on Ray's thread with the item's value, or the exception it holds
        refs[0]._on_completed(lambda value: soon(self._on_start, value))
        refs[1]._on_completed(lambda value: soon(self._on_reply, value))

    def _on_start(self, value: Any) -> None:
        if isinstance(value, BaseException):  # the task failed before it started
            self._on_reply(value)
            return
        self.pid = value
        self.started.set()

    def _on_reply(self, value: Any) -> None:
        if self.done.is_set():  # the start's failure ended it already
            return
        self.reply = outcome.Error(value) if isinstance(value, BaseException) else outcome.Value(value)
        self._end()

    def _follow(self) -> Any:
        self.pid = self.ray.get(next(self.gen))
        self._soon(self.started.set)
        return self.ray.get(next(self.gen))

    def _deliver(self, result: Any) -> None:
        self.reply = result
        self._soon(self._end)

    def _end(self) -> None:
        self.started.set()
        self.done.set()

    async def stop(self) -> None:
        """Cancel the task with force (its worker process is killed) and wait until Ray reports it
        ended. Call it shielded."""
        if self.done.is_set():
            return
        try:
            self.ray.cancel(self.gen, force=True)
        except Exception:  # noqa: BLE001 - the task may have ended meanwhile
            pass
        with trio.move_on_after(STOP_WAIT_S):
            await self.done.wait()


class RayExecutor(Executor):
    """``fn(**args)`` as a Ray task on the run's cluster."""

    name = "ray"
    abandons = False  # the task's worker is killed at the timeout
    copies_arguments = True  # they reach the task serialized

    def __init__(self, connection: RayConnection, output_cap_bytes: int):
        self.connection = connection
        self.cap = output_cap_bytes
        self._remote: dict[bool, Any] = {}

    def _function(self, tool: ToolSpec) -> Any:
        isolated = tool.isolation == "process"
        fn = self._remote.get(isolated)
        if fn is None:
            options: dict[str, Any] = {"max_retries": 0, "num_returns": "streaming"}
            if isolated:
                options["max_calls"] = 1  # a worker process of its own for every call
            body = toolloop_call_isolated if isolated else toolloop_call
            fn = self._remote[isolated] = self.connection.ray.remote(**options)(body)
        return fn

    async def prepare(self, tool: ToolSpec, args: dict[str, Any]) -> _Task:
        """Submit the call and wait until it starts in a worker: queueing for a CPU, starting a
        worker and importing the App are not the call's time."""
        ray = self.connection.ray
        try:
            task = _Task(ray, self._function(tool).remote((tool.ref, args, tool.is_async, self.cap, _identity())))
        except Exception as exc:  # noqa: BLE001 - Ray refused the submission
            raise OSError(f"Ray refused the task: {excerpt(_first_line(exc), 300)}") from None
        try:
            await task.started.wait()
        except BaseException:  # cancelled (a halt, a signal) before the call started
            with trio.CancelScope(shield=True):
                await task.stop()
            raise
        if task.done.is_set() and task.pid is None:
            err = _error_of(task.reply)
            if isinstance(err, ray.exceptions.RuntimeEnvSetupError):
                raise OSError(f"the Ray worker's environment could not be set up: {excerpt(_first_line(err), 300)}")
        return task

    async def run(self, tool: ToolSpec, args: dict[str, Any], prepared: _Task, slot: Any) -> Any:
        task = prepared
        try:
            await task.done.wait()
        except BaseException:  # the deadline, a halt or a signal: kill the task, wait for its end
            with trio.CancelScope(shield=True):
                await task.stop()
            raise
        return self._value(task.reply)

    def _value(self, reply: Any) -> Any:
        from ..procpool import WorkerOutputRejected
        from .failure import ToolRaised

        exc = _error_of(reply)
        if exc is None:
            kind, *rest = reply.unwrap()
            if kind == "ok":
                return rest[0]
            if kind == "error":
                raise ToolRaised(rest[0], rest[1])
            raise WorkerOutputRejected("output_too_large", f"result dropped: {rest[0]} bytes or more exceed the"
                                       f" output cap of {self.cap} bytes (--max-output-bytes)")
        ray_errors = self.connection.ray.exceptions
        if isinstance(exc, ray_errors.RayTaskError):  # only the reply's own serialisation can fail there
            cause = getattr(exc, "cause", None) or exc
            raise WorkerOutputRejected("not_json", "result cannot leave the worker process: "
                                       f"{type(cause).__name__}: {_first_line(cause)}")
        raise WorkerLost(f"the Ray worker running this call was lost ({type(exc).__name__}: {_first_line(exc)})")


def _identity() -> dict[str, Any] | None:
    """The running call's identity (``current_call()``), as plain data for the worker."""
    from ..identity import current_call

    try:
        ident = current_call()
    except LookupError:
        return None
    return {f.name: getattr(ident, f.name) for f in dataclasses.fields(ident)} | {"labels": dict(ident.labels)}


def _error_of(reply: Any) -> BaseException | None:
    """The exception a thread's outcome holds, or None for a value."""
    return getattr(reply, "error", None)


def make(run: Any) -> RayExecutor:
    return RayExecutor(run.ray_connection, run.output_cap_bytes)
