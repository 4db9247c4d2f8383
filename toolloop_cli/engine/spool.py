"""Lanes read from a stream (``--lanes``) go to the journal as they are admitted and are read
back a page at a time when they run, so memory stays bounded however many there are. A run whose
lanes fit in memory (``KEEP_CALLS``) also keeps them as admitted and runs them from there: the
journal still holds every one (resume reads them back), the run skips the round trip.

The journal never holds a redacted value, nor one of the run's secrets written literally in a
lane: arguments or payloads that hold one stay in memory (keyed by seq or lane) for the run, and
resume rebuilds them from ``--lanes FILE`` given again.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Iterator

from .. import _json

from .._canonical import sha256_of
from ..store.db import Connection, parse_json, parse_object
from ..contract.compiled import SubagentSpec
from ..plan.admit import AdmittedCall, AdmittedLane, project_payload
from .redact import Redactor, RunSecrets, run_credentials, without_run_secrets

PAGE_LANES = 256
#: lanes of at most this many calls in all are also kept in memory as admitted and run from there
#: (about 1 KB a call); past it the kept ones are dropped and the run reads them from the journal
KEEP_CALLS = 50_000


_REDACTORS: dict[tuple[str, ...], Redactor] = {}


def _redactor(pointers: tuple[str, ...]) -> Redactor:
    # one per distinct set of pointers: admitted calls are journaled by the thousand
    red = _REDACTORS.get(pointers)
    if red is None:
        red = _REDACTORS[pointers] = Redactor(pointers)
    return red


def stored_args(call: AdmittedCall) -> str | None:
    """The call's arguments as journaled: JSON, or None when they hold a redacted value (or come
    from the lane payload)."""
    if call.args is None:
        return None
    red = _redactor(call.tool.redact)
    if red.active and red.secrets(call.args):
        return None  # never journal a redacted value; resume rebuilds it from the plan
    return _json.dumps_text(call.args)  # integers of any size stay exact


def withheld_payload(lane: AdmittedLane) -> str | None:
    """The payload's hash when a call of its lane, fed from it, would receive a redacted value
    (the payload is then never journaled), else None."""
    if lane.payload is None:
        return None
    for c in lane.calls:
        red = _redactor(c.tool.redact)
        if red.active and red.secrets(project_payload(c.tool, lane.payload)):
            return sha256_of(lane.payload)
    return None


def lane_rows(lanes: list[AdmittedLane]) -> tuple[list[tuple], list[tuple]]:
    """The journal rows of admitted lanes: ``(index, item_key, payload, withheld)`` and calls."""
    lrows = [(lane.index, lane.item_key, lane.payload, None if lane.payload is None else withheld_payload(lane))
             for lane in lanes]
    crows = [(c.seq, c.lane, c.item_key, c.call_key, c.tool.id, stored_args(c), c.args_sha256)
             for lane in lanes for c in lane.calls]
    return lrows, crows


class ItemKeys:
    """Item key -> lane index of a run's admitted lanes, for refusing duplicates, in bounded memory:
    the lanes admitted before the spool took over (the plan file's, a bounded few) and those in
    the spool's current page are held here; while the spool keeps its lanes in memory
    (``KEEP_CALLS``) the keys of every lane are held too; past that, every other one is looked
    up in the journal (an index on the lanes table). Behaves as the dict admission used to keep."""

    __slots__ = ("spool", "held", "page", "seen", "known")

    #: bits of the filter of keys seen: 1 MiB whatever the number of lanes; a key it has not seen
    #: is new without asking the journal, and at a million lanes about 1 new key in 20 is asked
    BITS = 1 << 23

    def __init__(self, spool: LaneSpool, held: dict[str, int]):
        self.spool = spool
        self.held = dict(held)
        self.page: dict[str, int] = {}  # keys of the lanes buffered, not journaled yet
        self.seen = bytearray(self.BITS >> 3)
        #: every key the spool took while it keeps its lanes (as many as those lanes, so bounded
        #: by them): a plain lookup instead of the filter's two hashes a lane; None after
        self.known: dict[str, int] | None = {} if spool.keeping else None

    def _bits(self, key: str) -> tuple[int, int]:
        h = hash(key)
        return h & (self.BITS - 1), (h >> 23) & (self.BITS - 1)

    def _mark(self, key: str) -> None:
        a, b = self._bits(key)
        self.seen[a >> 3] |= 1 << (a & 7)
        self.seen[b >> 3] |= 1 << (b & 7)

    def get(self, key: str, default: int | None = None) -> int | None:
        known = self.known
        if known is not None:
            found = known.get(key)
            if found is None:
                found = self.held.get(key)
            return default if found is None else found
        found = self.page.get(key)
        if found is None:
            found = self.held.get(key)
        if found is None and self.spool.lanes > len(self.spool._buffer):
            a, b = self._bits(key)
            seen = self.seen
            if seen[a >> 3] & (1 << (a & 7)) and seen[b >> 3] & (1 << (b & 7)):
                found = self.spool.store.lane_of_item_key(self.spool.run_id, key)
        return default if found is None else found

    def __contains__(self, key: str) -> bool:
        return self.get(key) is not None

    def setdefault(self, key: str, lane: int) -> int:
        """The lane that holds ``key``: ``lane``, taken for it, when no lane held it before."""
        known = self.known
        if known is not None and self.spool.keeping:  # the lanes are kept: every key is here
            found = known.get(key)
            if found is None:
                found = self.held.get(key)
            if found is not None:
                return found
            known[key] = self.page[key] = lane
            return lane
        found = self.get(key)
        if found is not None:
            return found
        self[key] = lane
        return lane

    def __getitem__(self, key: str) -> int:
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return found

    def __setitem__(self, key: str, lane: int) -> None:
        self.page[key] = lane
        known = self.known
        if known is None:
            self._mark(key)
        elif self.spool.keeping:
            known[key] = lane
        else:  # the spool stopped keeping its lanes: the filter takes over, from every key so far
            for k in known:
                self._mark(k)
            self._mark(key)
            self.known = None

    def __delitem__(self, key: str) -> None:
        # only a lane not journaled yet is taken back (a lane refused by run --stream)
        if self.known is not None:
            self.known.pop(key, None)
        if self.page.pop(key, None) is None:
            self.held.pop(key, None)

    def journaled(self) -> None:
        """The buffered lanes went to the journal: their keys are found there from now on."""
        self.page.clear()


class LaneSpool:
    """Admitted lanes of one run, journaled in pages as they arrive."""

    def __init__(self, store: Any, run_id: str, page: int = PAGE_LANES, grow_total: bool = False,
                 keep_calls: int = KEEP_CALLS, secrets: RunSecrets | None = None):
        self.store = store
        #: the run's secrets: a lane that holds one literally is journaled without it (``admitting``
        #: finds them when lanes are spooled before the run has its own)
        self.secrets = secrets
        self.keep_calls = keep_calls
        #: the lanes as admitted while they fit in ``keep_calls`` (None once they do not)
        self._kept: list[AdmittedLane] | None = [] if keep_calls > 0 else None
        self.run_id = run_id
        self.page = page
        self.grow_total = grow_total  # the run is already journaled: count the calls into it
        self._buffer: list[AdmittedLane] = []
        self.lanes = 0
        self.calls = 0
        self.first_lane: int | None = None
        self._args: dict[int, dict] = {}  # seq -> arguments that hold a redacted value
        self._payloads: dict[int, dict] = {}  # lane -> payload that holds a redacted value
        self.keys: ItemKeys | None = None

    @property
    def keeping(self) -> bool:
        """Whether the lanes admitted so far are all kept in memory."""
        return self._kept is not None

    def item_keys(self, held: dict[str, int]) -> ItemKeys:
        """The run's item-key index from now on: ``held`` (keys admitted before, kept in memory)
        and every lane this spool journals (looked up in the journal)."""
        self.keys = ItemKeys(self, held)
        return self.keys

    def admitting(self, contract: Any) -> None:
        """Lanes of a run of ``contract`` are about to be admitted (before the run starts): the
        credentials such a run reads are its secrets."""
        if self.secrets is None:
            import os

            self.secrets = RunSecrets(run_credentials(contract, os.environ))

    def add(self, lane: AdmittedLane) -> None:
        if self.first_lane is None:
            self.first_lane = lane.index
        self.lanes += 1
        self.calls += len(lane.calls)
        if self._kept is not None:
            if self.calls <= self.keep_calls:
                self._kept.append(lane)
            else:
                self._kept = None
        self._buffer.append(lane)
        if len(self._buffer) >= self.page:
            self.flush()

    def flush(self) -> None:
        if not self._buffer:
            return
        # arguments and payloads that hold a redacted value or a run secret are withheld (kept
        # in memory for this run; a resume rebuilds them from --lanes FILE given again)
        lrows, crows = without_run_secrets(self.secrets, *lane_rows(self._buffer))
        for (index, _k, payload, withheld), lane in zip(lrows, self._buffer):
            if withheld is not None:
                self._payloads[index] = payload
        for row, call in zip(crows, (c for lane in self._buffer for c in lane.calls)):
            if row[5] is None and call.args is not None:
                self._args[call.seq] = call.args
        self.store.journal_calls(self.run_id, lrows, crows, grow_total=self.grow_total)
        self._buffer.clear()
        if self.keys is not None:
            self.keys.journaled()

    def discard(self) -> None:
        self._buffer.clear()
        self._kept = [] if self.keep_calls > 0 else None
        self.store.discard_calls(self.run_id)

    def iter_lanes(self, subagent: SubagentSpec) -> Iterator[AdmittedLane]:
        """The spooled lanes in order, rebuilt a page at a time from the journal."""
        self.flush()
        if self.first_lane is None:
            return
        if self._kept is not None:
            yield from self._kept
            return
        # a reader of its own (WAL lets it run beside the writer), through the journal's read layer
        db = Connection(sqlite3.connect(self.store.path), self.store.path)
        try:
            lo = self.first_lane
            last = self.first_lane + self.lanes - 1
            while lo <= last:
                hi = min(lo + self.page - 1, last)
                lanes = {}
                for index, item_key, payload, withheld in db.execute(
                        "SELECT lane, item_key, payload, payload_sha256 FROM lanes"
                        " WHERE run_id=? AND lane BETWEEN ? AND ? ORDER BY lane", (self.run_id, lo, hi)):
                    body = self._payloads.get(index) if withheld is not None else (
                        None if payload is None
                        else parse_object(payload, f"the payload of lane {index}", run_id=self.run_id))
                    lanes[index] = AdmittedLane(index, item_key, body, [])
                for seq, lane, item_key, call_key, tool, args, sha in db.execute(
                        "SELECT seq, lane, item_key, call_key, tool, args, args_sha256 FROM calls"
                        " WHERE run_id=? AND lane BETWEEN ? AND ? ORDER BY seq", (self.run_id, lo, hi)):
                    value = (parse_json(args, f"the arguments of call seq {seq}", self.run_id) if args is not None
                             else self._args.get(seq))
                    lanes[lane].calls.append(
                        AdmittedCall(seq, lane, item_key, call_key, subagent.tools[tool], value, sha))
                for index in range(lo, hi + 1):
                    yield lanes[index]
                lo = hi + 1
        finally:
            db.close()
