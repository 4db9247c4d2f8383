"""Lanes from JSON Lines (``--lanes``): read as a stream and admitted all before the run
(``read_lanes``), or one at a time just before each runs (``LaneStream``, ``run --stream``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

import orjson

from .. import _json
from ..contract.problems import Collector, Problem
from ..contract.source import SourceMap

if TYPE_CHECKING:
    from .admit import AdmittedLane, _Admitter


def read_lanes(source: IO[bytes], shown: str, adm: _Admitter, problems: list[Problem], spool: Any = None) -> None:
    # one collector for the whole stream: every finding is placed at the line being read
    from pydantic import ValidationError  # the lane model loads only for --lanes

    from ..contract.validation import report_model_errors
    from .models import LaneDecl

    smap = SourceMap(shown)
    col = Collector(smap, problems)
    if spool is not None and hasattr(spool, "item_keys"):
        adm.item_keys = spool.item_keys(adm.item_keys)  # journaled keys are looked up, not held
    if spool is not None and hasattr(spool, "admitting"):
        spool.admitting(adm.contract)  # the run's credentials: never journaled as a lane holds them
    for lineno, raw in enumerate(source, start=1):
        if not raw.strip():
            continue
        smap.values[()] = (lineno, 1)
        lane = well_formed(raw)  # the fast path: a well-formed lane, read without a model
        if lane is None:
            try:
                lane = LaneDecl.model_validate_json(raw)
            except ValidationError:
                pass
        if lane is not None:
            adm.lane(lane, (), col)
            if spool is not None:
                spool.add(adm.lanes.pop())  # journaled now, read back when it runs
            continue
        try:
            data = _json.loads(raw)
        except _json.JSONDecodeError as exc:
            col.add("TL414", f"line is not JSON: {exc}", hint="write one lane object per line")
            continue
        if not isinstance(data, dict):
            col.add("TL414", "line is not a lane object", hint='write {"item_key": ..., "calls": [...]}')
            continue
        try:
            lane = LaneDecl.model_validate(data)
        except ValidationError as exc:
            report_model_errors(exc, LaneDecl, col, data=data)
            continue
        adm.lane(lane, (), col)
        if spool is not None:
            spool.add(adm.lanes.pop())


@dataclass
class RejectedLane:
    """A lane refused by ``run --stream``: its calls get ``invalid_input`` receipts."""

    item_key: str | None
    calls: list[tuple[int, str, str]]  # (seq, call_key, tool id as written)
    problems: list[Problem]


class LaneStream:
    """Lanes admitted one at a time, each just before it runs (``run --stream``). Duplicate keys
    and call limits are checked against everything admitted before it.

    Lines are read as they arrive: ``next_lanes`` admits the lines already available (up to a
    page), so a fast producer's lanes are admitted and journaled a page at a time while a slow
    one's are admitted as each line comes."""

    #: the most lanes admitted (and journaled) in one step
    PAGE = 256
    _CHUNK = 1 << 16

    def __init__(self, adm: "_Admitter", source: IO[bytes], shown: str):
        self._adm = adm
        self._source = source
        self._smap = SourceMap(shown)
        self._lineno = 0
        self._buf = bytearray()
        self._eof = False
        self.journal: Any = None  # a LaneSpool: each admitted lane is journaled before it runs

    def journal_to(self, spool: Any) -> None:
        """Journal each admitted lane with ``spool``, which also holds the item-key index."""
        self.journal = spool
        self._adm.item_keys = spool.item_keys(self._adm.item_keys)

    @property
    def calls_so_far(self) -> int:
        return self._adm.seq

    def next_lane(self) -> AdmittedLane | RejectedLane | None:
        """The next lane, admitted or rejected; None at the end of the stream. Blocking: call it
        from a worker thread."""
        while True:
            lines = self._lines(1)
            if not lines:
                return None
            self._lineno += 1
            if lines[0].strip():
                break
        lane = self._admit(lines[0])
        if self.journal is not None:
            self.journal.flush()
        return lane

    def next_lanes(self) -> list[AdmittedLane | RejectedLane]:
        """The lanes of the lines available now (waiting for one when none is), admitted or
        rejected in order and journaled together; an empty list at the end of the stream.
        Blocking: call it from a worker thread."""
        out: list[AdmittedLane | RejectedLane] = []
        for raw in self._lines():
            self._lineno += 1
            if raw.strip():
                out.append(self._admit(raw))
        if self.journal is not None:
            self.journal.flush()
        return out

    def _lines(self, limit: int = PAGE) -> list[bytes]:
        """Whole lines already read or readable without waiting (at least one unless the input
        ended), at most ``limit`` of them."""
        buf = self._buf
        while True:
            lines: list[bytes] = []
            start = 0
            while len(lines) < limit:
                end = buf.find(b"\n", start)
                if end < 0:
                    break
                lines.append(bytes(buf[start:end + 1]))
                start = end + 1
            if start:
                del buf[:start]
            if lines:
                return lines
            if self._eof:
                if buf:
                    last = bytes(buf)
                    buf.clear()
                    return [last]
                return []
            read1 = getattr(self._source, "read1", None)
            chunk = read1(self._CHUNK) if read1 is not None else self._source.readline()
            if not chunk:
                self._eof = True
            else:
                buf += chunk

    def _admit(self, raw: bytes) -> AdmittedLane | RejectedLane:
        self._smap.values[()] = (self._lineno, 1)
        col = Collector(self._smap, [])
        decl, data = _parse_lane(raw, col)
        if decl is None:
            return _unreadable(self._adm, data, col)
        adm = self._adm
        seq0 = adm.seq
        adm.lane(decl, (), col)
        lane = adm.lanes.pop()
        adm.lane_limits(decl, col)
        if not col.has_errors:
            if self.journal is not None:
                self.journal.add(lane)
            return lane
        # a rejected lane still holds its seqs (its receipts say why) but not its lane index
        # or item key
        adm.withdraw(decl, lane)
        return RejectedLane(decl.item_key, [(seq0 + i, c.call_key if c.call_key is not None else str(i), c.tool)
                                            for i, c in enumerate(decl.calls)], col.problems)


class _Call:
    __slots__ = ("tool", "call_key", "args")

    def __init__(self, tool: str, call_key: str | None, args: dict | None):
        self.tool, self.call_key, self.args = tool, call_key, args


class _Lane:
    """A lane declaration read by ``well_formed``: the attributes of a ``LaneDecl``, no model."""

    __slots__ = ("item_key", "calls", "payload")

    def __init__(self, item_key: str, calls: list[_Call], payload: dict | None):
        self.item_key, self.calls, self.payload = item_key, calls, payload


_LANE_KEYS = frozenset(("item_key", "calls", "payload"))
_CALL_KEYS = frozenset(("tool", "call_key", "args"))


def well_formed(raw: bytes) -> Any:
    """The lane of a line that is JSON of exactly the shape ``LaneDecl`` takes (strict strings,
    at least one call, objects for arguments and payload, no other keys), read without building a
    model; None for anything else, which then goes through ``LaneDecl`` for its findings (a line
    JSON cannot read here, such as NaN or an integer past 64 bits, included)."""
    if _json.wide_number(raw):  # orjson would read it as a float: LaneDecl keeps it exact
        return None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if type(data) is not dict:
        return None
    item_key, calls, payload = data.get("item_key"), data.get("calls"), data.get("payload")
    if type(item_key) is not str or type(calls) is not list or not calls or (
            payload is not None and type(payload) is not dict):
        return None
    # no other keys: as many as those found set (the common case), else all of them known
    if len(data) != 2 + (payload is not None) and not data.keys() <= _LANE_KEYS:
        return None
    read = []
    for c in calls:
        if type(c) is not dict:
            return None
        tool, key, args = c.get("tool"), c.get("call_key"), c.get("args")
        if type(tool) is not str or (key is not None and type(key) is not str) or (
                args is not None and type(args) is not dict):
            return None
        if len(c) != 1 + (key is not None) + (args is not None) and not c.keys() <= _CALL_KEYS:
            return None
        read.append(_Call(tool, key, args))
    return _Lane(item_key, read, payload)


def _parse_lane(raw: bytes, col: Collector) -> tuple[Any, Any]:
    """The line as a lane declaration (None, with findings, when it is not one), and its JSON
    data when it was read but is no lane."""
    lane = well_formed(raw)
    if lane is not None:
        return lane, None
    from pydantic import ValidationError  # a line that is no plain lane: the model says why

    from ..contract.validation import report_model_errors
    from .models import LaneDecl

    try:
        return LaneDecl.model_validate_json(raw), None
    except ValidationError:
        pass
    try:
        data = _json.loads(raw)
    except _json.JSONDecodeError as exc:
        col.add("TL414", f"line is not JSON: {exc}", hint="write one lane object per line")
        return None, None
    if not isinstance(data, dict):
        col.add("TL414", "line is not a lane object", hint='write {"item_key": ..., "calls": [...]}')
        return None, data
    try:
        return LaneDecl.model_validate(data), data
    except ValidationError as exc:
        report_model_errors(exc, LaneDecl, col, data=data)
        return None, data


def _unreadable(adm: Any, data: Any, col: Collector) -> RejectedLane:
    """Not even a lane: its calls (if any can be read) are reported, others only as findings."""
    calls = data.get("calls") if isinstance(data, dict) and isinstance(data.get("calls"), list) else []
    rows = []
    for i, c in enumerate(calls):
        tool = c.get("tool") if isinstance(c, dict) and isinstance(c.get("tool"), str) else "?"
        key = c.get("call_key") if isinstance(c, dict) and isinstance(c.get("call_key"), str) else str(i)
        rows.append((adm.seq, key, tool))
        adm.seq += 1
    item_key = data.get("item_key") if isinstance(data, dict) and isinstance(data.get("item_key"), str) else None
    return RejectedLane(item_key, rows, col.problems)
