"""How a run goes (``RunOptions``): what it was asked to do, journaled with it and read back when it
is resumed, and the hooks of whoever runs it (callbacks, the clock, signal handling), never
journaled. Plain data, read by the session, the runners and ``launch``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable

from ..contract.problems import Problem
from ..receipts import Receipt
from .context import DEFAULT_OUTPUT_CAP
from .runstate import HaltPolicy


def _journaled(default: Any) -> Any:
    """A field that is part of what the run was asked to do: journaled with the run, and read back
    by ``RunOptions.from_journal`` when it is resumed."""
    return field(default=default, metadata={"journaled": True})


@dataclass(frozen=True)
class RunOptions:
    """How a run goes: the options it was asked for (the journaled fields, stored with the run as
    they are and read back by ``from_journal``) and the hooks of whoever runs it (callbacks, the
    clock, signal handling: never journaled)."""

    halt: HaltPolicy | None = _journaled(None)
    default_timeout_s: float | None = _journaled(None)
    no_cache: bool = _journaled(False)
    refresh_cache: bool = _journaled(False)
    output_cap_bytes: int = _journaled(DEFAULT_OUTPUT_CAP)
    approve: str = _journaled("ask")  # answer to approval gates: ask | all | none
    order: str = _journaled("input")  # input | completion (run --order)
    # where calls of callables run: "local" (this process, its threads and worker processes) or
    # "ray" (tasks on the cluster at ``ray_address``, else RAY_ADDRESS, else a local Ray for the run)
    executor: str = _journaled("local")
    ray_address: str | None = _journaled(None)
    # out-of-band identity of the run (run --label KEY=VALUE), journaled as the run's labels rather
    # than with its options; None on resume keeps the run's own
    labels: dict[str, str] | None = None

    audit: Callable[[dict[str, Any]], None] | None = None
    ask: Any = None  # with approve=ask: a person at a terminal (cli/prompt.py); None pauses the run
    on_receipt: Callable[[Receipt], None] | None = None  # progress display, in the engine thread
    # called on the output thread after each batch of records handed to ``emit`` (flush a pipe
    # once per batch rather than once per record)
    flush_output: Callable[[], None] | None = None
    # a sink's writer that also takes the bytes a record is journaled as: when set, each record the
    # journal hands on goes to ``emit_line(record, line)`` instead of ``emit(record)``, ``line`` its
    # compact JSON as stored (``_json.dumps``) or None, so a JSON writer need not encode it again
    emit_line: Callable[[dict[str, Any], bytes | None], None] | None = None
    # findings of a lane refused by ``run --stream`` (its calls get invalid_input receipts)
    on_rejected: Callable[[list[Problem]], None] | None = None
    # SIGINT/SIGTERM handling (main thread only): the first signal cancels the run, a second forces
    # an exit with code 130. ``on_signal`` gets a one-line notice for a person; it may be called
    # from a signal handler, so it must not take locks (write with os.write).
    handle_signals: bool = True
    on_signal: Callable[[str], None] | None = None
    # one-line warnings for a person (a damaged cache entry): standard error in the CLI
    on_warning: Callable[[str], None] | None = None
    # the event loop's clock: None for the real one (trio.testing.MockClock makes timeout tests instant)
    clock: Any = None
    # provider instances by provider name: each answers every profile of a routed run (and of its
    # child runs) that names it, instead of one made from the profile; the caller closes them
    providers: dict[str, Any] | None = None
    # whether the plan's ``notify`` is told about the run (off for a replay and a test case)
    notifications: bool = True

    def journal_form(self) -> dict[str, Any]:
        """The journaled fields as the run's ``options`` hold them (the halt policy as a mapping)."""
        form = {f.name: getattr(self, f.name) for f in fields(self) if f.metadata.get("journaled")}
        form["halt"] = self.halt.journal_form() if self.halt else None
        return form

    @classmethod
    def from_journal(cls, journaled: dict[str, Any] | None, **hooks: Any) -> RunOptions:
        """The options a journaled run was started with (its ``options``; keys it does not know, and
        the plan's own, are left aside; one it lacks, journaled by an older toolloop, takes its
        default), with ``hooks`` set."""
        journaled = journaled or {}
        taken = {f.name: journaled[f.name] for f in fields(cls)
                 if f.metadata.get("journaled") and journaled.get(f.name) is not None}
        if taken.get("halt") is not None:
            taken["halt"] = HaltPolicy(**taken["halt"])
        return cls(**taken, **hooks)
