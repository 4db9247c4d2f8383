"""Composing a run from what a command asks for: a new run, a resume, a replay, an ad-hoc call.

A command (the CLI, ``toolloop serve``, a library user) turns its flags into ``RunOptions`` and a
few choices of its own, asks a ``Launch`` to prepare the run, starts it with a ``Sink`` for its
records and the hooks it wants (progress, a terminal prompt, notices), and renders what comes back;
nothing here prints. What a run needs before it starts is owned here: the state folder's store
(opened early when ``--lanes`` stream into the journal as they are admitted), the run id chosen
then, the lane spool, the lease a resume takes, and the journaled options turned back into
options (``RunOptions.from_journal``). Fork, test-case and MCP-server runs are further ``Launch``
methods over the same ``Prepared`` and ``start``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, replace
from typing import IO, Any, Protocol

from ..errors import ConfigError, UsageError
from ..plan.admit import AdmittedPlan
from .options import RunOptions
from .run import execute_plan
from .runstate import HaltPolicy
from .session import RunResult, new_run_id

__all__ = ["HaltPolicy", "Launch", "Prepared", "RunOptions", "Sink", "open_lanes", "resumed_options"]


class Sink(Protocol):
    """Where a run's records go, each after its commit: ``write`` one record, ``flush`` after each
    batch (both called on the journal's output thread). ``line``, when given, is the record's
    compact JSON as the journal stored it (``_json.dumps(record)``): a JSON writer may write it
    instead of encoding the record; any other sink ignores it."""

    def write(self, record: dict, line: bytes | None = None) -> None: ...

    def flush(self) -> None: ...


@dataclass(frozen=True)
class Prepared:
    """A run ready to start: its admitted plan and options; on resume, its id and what is settled
    already; on replay, the recording and the records it printed; ``source`` the journaled run it
    goes on from (resume, replay)."""

    plan: AdmittedPlan
    options: RunOptions
    run_id: str | None = None
    resume: dict | None = None
    recording: Any = None
    source: dict | None = None
    recorded: list[dict] = field(default_factory=list)

    @property
    def parent_run_id(self) -> str | None:
        """The parent of a child run resumed on its own (its parent still waits for it)."""
        return ((self.source or {}).get("options") or {}).get("parent_run_id") if self.resume is not None else None


def open_lanes(lanes: str) -> IO[bytes]:
    """``--lanes FILE`` (or ``-``, standard input) opened for reading; a UsageError when it cannot be."""
    if lanes == "-":
        return sys.stdin.buffer
    try:
        return open(lanes, "rb")
    except OSError as exc:
        raise UsageError(f"cannot read --lanes {lanes}: {exc.strerror}") from None


def _close_lanes(stream: IO[bytes] | None) -> None:
    if stream is not None and stream is not sys.stdin.buffer:
        stream.close()


def resumed_options(journaled: dict | None, *, halt: HaltPolicy | None = None, order: str | None = None,
                    approve: str | None = None, executor: str | None = None,
                    ray_address: str | None = None) -> RunOptions:
    """The options a resume runs with: the run's own, with what the command line gives instead. A
    run resumed with another executor than Ray forgets the Ray address it was started with."""
    options = RunOptions.from_journal(journaled)
    changed: dict[str, Any] = {k: v for k, v in (("halt", halt), ("order", order), ("approve", approve),
                                                 ("executor", executor)) if v is not None}
    if executor is not None and executor != "ray":
        changed["ray_address"] = None
    if ray_address:
        changed["ray_address"] = ray_address
    return replace(options, **changed)


class Launch:
    """One command's run, from its state folder to its end. ``store`` is open from ``open()`` (or
    the early store of streamed lanes) until ``start`` returns or ``close()``."""

    def __init__(self, state_dir: str | os.PathLike[str] | None = None):
        self.state_dir = os.fspath(state_dir) if state_dir is not None else None
        from ..contract import use_state_folder

        use_state_folder(self.state_dir)  # where MCP servers' client-credential tokens are kept
        self.store: Any = None
        #: the run started, resumed or replayed, once known (a rejected resume or replay names it)
        self.run_id: str | None = None

    # --- the state folder ---------------------------------------------------------------------
    def open(self, *, create: bool = True) -> Any:
        """The state folder's store, opened once (``create=False``: it must exist already)."""
        if self.store is None:
            from ..store import Store, state_dir as pick

            self.store = Store(pick(self.state_dir), create=create)
        return self.store

    def close(self) -> None:
        store, self.store = self.store, None
        if store is not None:
            store.close()

    # --- preparing a run ----------------------------------------------------------------------
    def admit(self, plan: str | os.PathLike[str], options: RunOptions, *, registry: str | None = None,
              app_root: str | None = None, max_concurrency: int | None = None, lanes: IO[bytes] | None = None,
              lanes_name: str = "-", stream: bool = False, journal_lanes: bool = True) -> Prepared:
        """A new run of a plan file, admitted. Lanes read from ``lanes`` go to the journal as they
        are admitted (bounded memory) unless ``stream`` admits each as it starts, or
        ``journal_lanes`` is off (a dry run); the store is opened and the run id chosen for that.
        Raises ConfigError with every finding (nothing journaled is left behind)."""
        from ..contract.mcp_discovery import discovered
        from ..plan.admit import admit_plan

        spool = None
        if lanes is not None and journal_lanes and not stream:
            from .spool import LaneSpool

            self.open()
            self.run_id = new_run_id()
            spool = LaneSpool(self.store, self.run_id)
        try:
            # the plan's MCP servers are listed first (a step of its own), then the plan admitted
            admitted = discovered(lambda servers: admit_plan(
                plan, registry=registry, app_root=app_root, max_concurrency=max_concurrency, lanes=lanes,
                lanes_name=lanes_name, default_timeout_s=options.default_timeout_s, spool=spool, stream=stream,
                placement=options.executor, servers=servers))
        except ConfigError:
            if spool is not None:
                spool.discard()
                self.close()
            raise
        return Prepared(admitted, options, run_id=self.run_id)

    def call(self, registry: str | os.PathLike[str], subagent: str, tool: str, args: dict,
             options: RunOptions) -> Prepared:
        """One ad-hoc call as a run of its own, its run id chosen now (it is said before the call
        runs, so a call that hangs or pauses is found by it). Raises ConfigError."""
        from .adhoc import adhoc_plan

        admitted = adhoc_plan(registry, subagent, tool, args, options.default_timeout_s)
        self.run_id = new_run_id()
        return Prepared(admitted, options, run_id=self.run_id)

    def mcp_server(self, registry: str | os.PathLike[str], subagent: str | None, options: RunOptions) -> Prepared:
        """The run of an MCP server process (``toolloop mcp serve``, mode ``mcp``): the subagent's
        allowed tools admitted, its run id chosen now; its calls arrive while it runs, started with
        the server's runner (``start(..., runner=...)``). Raises ConfigError or UsageError."""
        from .adhoc import server_plan

        admitted = server_plan(registry, subagent, options.default_timeout_s)
        self.run_id = new_run_id()
        return Prepared(admitted, options, run_id=self.run_id)

    def resume(self, run_id: str, *, retry_failed: bool = False, retry_interrupted: bool = False,
               lanes: str | None = None, accept_contract_change: bool = False, halt: HaltPolicy | None = None,
               order: str | None = None, approve: str | None = None, executor: str | None = None,
               ray_address: str | None = None, owner: str | None = None, raises: dict[str, Any] | None = None,
               by: str | None = None) -> Prepared:
        """A journaled run (id or unique prefix) ready to go on, its lease taken (by ``owner``, a
        lease token, when given), with its own options but for those given here; a new ``halt`` is
        journaled with it, and so are ``raises`` of the budgets of a run a budget paused (made
        ``by`` a person: ``resume --raise``). Raises UsageError (no such run, ``lanes``
        unreadable, a run paused by a budget not raised, a raise refused), RunError (it runs
        elsewhere) or ConfigError (it cannot be resumed; nothing is written)."""
        from .raises import journal_raises, planned_raises
        from .resume import check_not_running, find_run, owner_token, prepare_resume

        store = self.open(create=False)
        try:
            run = find_run(store, run_id)
            self.run_id = run["run_id"]
            owner = owner or owner_token()
            check_not_running(store, self.run_id, owner)
        except BaseException:
            self.close()
            raise
        stream = None
        try:
            stream = open_lanes(lanes) if lanes is not None else None
            plan, settled = prepare_resume(store, run, retry_failed=retry_failed, retry_interrupted=retry_interrupted,
                                           owner=owner, lanes=stream, lanes_name=lanes or "-",
                                           accept_contract_change=accept_contract_change)
            journal_raises(store, planned_raises(store, run, raises or {}, by=by))
        except BaseException:
            store.release_lease(self.run_id, owner)
            self.close()
            raise
        finally:
            _close_lanes(stream)
        options = resumed_options(run["options"], halt=halt, order=order, approve=approve, executor=executor,
                                  ray_address=ray_address)
        if halt is not None:
            store.set_option(self.run_id, "halt", halt.journal_form())
        return Prepared(plan, options, run_id=self.run_id, resume=settled, source=run)

    def raise_refusal(self, run_id: str, raises: dict[str, Any] | None) -> str | None:
        """Why resuming the run with ``raises`` would be a usage error (a budget paused it and is
        not raised enough, or nothing to raise), or None; nothing is written."""
        from .raises import planned_raises
        from .resume import find_run

        store = self.open(create=False)
        try:
            planned_raises(store, find_run(store, run_id), raises or {}, by=None)
        except UsageError as exc:
            return str(exc)
        return None

    def top_run(self, prepared: Prepared) -> str:
        """The run whose resume finishes a child run (its top ancestor)."""
        from ..lineage import top_run_of

        return top_run_of(self.open(create=False), prepared.source)

    def replay(self, run_id: str, *, offline: bool = False, execute_writes: bool = False) -> Prepared:
        """A recorded routed run again, as a new run, from its recorded model answers: the cache off,
        approval gates answered from the recording, its timeout and output cap as it had them.
        Raises UsageError (no such run, not a routed run) or ConfigError (it cannot be replayed)."""
        from .replay import prepare_replay, recorded_records
        from .resume import find_run

        store = self.open(create=False)
        try:
            run = find_run(store, run_id)
            self.run_id = run["run_id"]
            recorded = recorded_records(store, run)
            plan, recording = prepare_replay(store, run, offline=offline, execute_writes=execute_writes)
            recording.raises = [c for c in store.controls_after(run["run_id"], 0) if c[1] == "raise"]
        finally:
            self.close()
        journaled = RunOptions.from_journal(run["options"])
        options = RunOptions(default_timeout_s=journaled.default_timeout_s, output_cap_bytes=journaled.output_cap_bytes,
                             no_cache=True, approve="none", notifications=False, labels=_labels_of(run))
        return Prepared(plan, options, recording=recording, source=run, recorded=recorded)

    def fork(self, run_id: str, from_turn: int, *, plan: str | os.PathLike[str] | None = None,
             execute_writes: bool = False) -> Prepared:
        """A new run forked from a recorded routed run at turn ``from_turn``: the turns before it
        take the recorded answers and tool results, and from it the loop goes on live with
        ``plan`` (default: the run's plan file as it is now), its profiles and their keys; write
        and destructive calls from that turn on are denied unless ``execute_writes``. The fork
        runs with the recorded run's options. Raises UsageError (no such run or turn, not a
        routed run) or ConfigError (it cannot be forked: the plan no longer admits the recorded
        turns, or the chain does not hold)."""
        from .replay import prepare_fork
        from .resume import find_run

        store = self.open(create=False)
        try:
            run = find_run(store, run_id)
            self.run_id = run["run_id"]
            admitted, recording = prepare_fork(store, run, from_turn, execute_writes=execute_writes,
                                               plan_file=os.path.abspath(plan) if plan is not None else None)
        finally:
            self.close()
        options = replace(RunOptions.from_journal(run["options"]), labels=_labels_of(run))
        return Prepared(admitted, options, recording=recording, source=run)

    def replay_differences(self, prepared: Prepared, result: RunResult) -> list[str]:
        """What the replay ``result`` did differently from the recording it replayed, one line each."""
        from .replay import differences, recorded_records

        store = self.open(create=False)
        try:
            return differences(prepared.recorded, recorded_records(store, store.get_run(result.summary["run_id"])))
        finally:
            self.close()

    def case(self, plan: str | os.PathLike[str], options: RunOptions, *, context: dict | None = None,
             recording: Any = None, recorded_mcp: dict | None = None) -> Prepared:
        """A test case's run (``toolloop test``): the plan admitted with the case's ``context`` in
        place of its own, and the ``recording`` it replays (a ``Recording`` with ``replay`` set:
        every model answer, and the tool results it gives, from the case's fixture; None: the case
        runs live). ``recorded_mcp``: what each MCP tool's server offered when the case was recorded
        ("subagent/tool" -> offer), admitted from instead of listing those servers. Raises ConfigError."""
        from ..contract.mcp_discovery import RECORDED, discovered
        from ..plan.admit import admit_plan

        admitted = discovered(lambda servers: admit_plan(
            plan, default_timeout_s=options.default_timeout_s, placement=options.executor, servers=servers,
            context=context), {RECORDED: recorded_mcp} if recorded_mcp else None)
        return Prepared(admitted, options, recording=recording)

    # --- running it ---------------------------------------------------------------------------
    def start(self, prepared: Prepared, sink: Sink, runner: Any = None, **hooks: Any) -> RunResult:
        """Run a prepared run to its end (or interruption), each record committed before ``sink``
        gets it, the summary last; ``hooks`` are the non-journaled ``RunOptions`` fields (progress,
        the terminal prompt, notices, the audit sink, signal handling, the clock). ``runner``
        runs it instead of the plan's own (an MCP server's run). The store is closed when it returns."""
        options = replace(prepared.options, flush_output=sink.flush, emit_line=sink.write, **hooks)
        store = self.open()
        try:
            return execute_plan(prepared.plan, store, sink.write, options, run_id=prepared.run_id,
                                resume=prepared.resume, replay=prepared.recording, runner=runner)
        finally:
            self.close()


def _labels_of(run: dict[str, Any]) -> dict[str, str]:
    """A recorded run's labels, which its replays and forks carry as a resume does."""
    return dict(run.get("labels") or {})
