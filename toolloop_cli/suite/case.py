"""Running one case once, through ``engine/launch.py``: a journaled run like any other, labelled
``toolloop.test=SUITE:CASE``. A case with a fixture replays it (every model answer from the file,
so no network and no key; tool results as ``tools`` says, faults laid over them); a case without
one runs live (its profiles and keys, its tools for real, gates answered as ``approve`` says).
``record_fixture`` writes a live run's export where the case's fixture goes (``--record``)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ConfigError, UsageError
from .expect import Verdict, check_run, failure
from .fixture import Fixture
from .load import Case

#: the label every case's run carries: ``SUITE:CASE``
LABEL = "toolloop.test"


@dataclass
class CaseRun:
    """One run of a case: its id (None when it could not start), its verdict, its wall time."""

    run_id: str | None
    verdict: Verdict
    duration_ms: float
    interrupted: bool = False  # a signal stopped the run: the suite stops too


class _Collected:
    """The run's records, kept in memory for the checks (the journal holds them too)."""

    def __init__(self) -> None:
        self.records: list[dict] = []

    def write(self, record: dict, line: bytes | None = None) -> None:
        self.records.append(record)

    def flush(self) -> None:
        return None


@dataclass(frozen=True)
class CaseSettings:
    """What the ``test`` command gives every case: the state folder, how gates of a live case are
    answered, provider instances (library callers and tests), and the runs' hooks."""

    state_dir: str | None = None
    approve: str = "none"
    providers: dict[str, Any] | None = None
    hooks: dict[str, Any] = field(default_factory=dict)


def _recording(case: Case, fixture: Fixture, subagent: str) -> Any:
    from ..engine.rerun import in_flight_by_form
    from .recorded import CaseRecording

    # an export keeps no start markers: its writes that were in flight are known by their receipts
    return CaseRecording(answers=list(fixture.answers), receipts=dict(fixture.receipts), replay=True,
                         started=in_flight_by_form(fixture.receipts.values()),
                         offline=case.decl.tools == "recorded", execute_writes=False, subagent=subagent,
                         faults=tuple(case.decl.faults or ()))


def _options(case: Case, settings: CaseSettings, *, live: bool) -> Any:
    from ..engine.launch import RunOptions

    labels = {LABEL: case.label}
    # a case tells nobody: the plan's ``notify`` is for the runs people wait on, not for tests
    if live:
        return RunOptions(approve=settings.approve, labels=labels, providers=settings.providers, notifications=False)
    # a replay: gates take their recorded answers, nothing is asked and nothing is cached
    return RunOptions(approve="none", labels=labels, no_cache=True, notifications=False)


def run_case(case: Case, settings: CaseSettings, *, fixture: Fixture | None = None, live: bool = False) -> CaseRun:
    """Run ``case`` once and judge it. ``fixture`` replaces the case's own (``--record``);
    ``live`` runs it with no fixture at all."""
    from ..engine.launch import Launch

    t0 = time.perf_counter()
    fixture = None if live else (fixture or case.fixture)
    launch = Launch(settings.state_dir)
    try:
        if case.mode is None:
            raise UsageError(f"plan {case.decl.plan} cannot be read as a plan")
        options = _options(case, settings, live=fixture is None)
        # a recorded case reads its MCP tools' schemas from the fixture: their servers never start
        recorded_mcp = fixture.mcp_tools if fixture is not None and case.decl.tools == "recorded" else None
        prepared = launch.case(case.plan_path, options, context=case.decl.context, recorded_mcp=recorded_mcp)
        if fixture is not None:
            prepared = replace(prepared, recording=_recording(case, fixture, prepared.plan.subagent.id))
        sink = _Collected()
        result = launch.start(prepared, sink, **settings.hooks)
    except (ConfigError, UsageError) as exc:
        launch.close()
        why = _problems(exc) if isinstance(exc, ConfigError) else str(exc)
        return CaseRun(None, Verdict("error", [failure("run", "a run that starts", why)]), _ms(t0))
    summary = result.summary
    run_id = summary.get("run_id")
    receipts = sorted((r for r in sink.records if r.get("type") == "receipt" and r.get("run_id") == run_id),
                      key=lambda r: r.get("seq", 0))
    answers = _answers(settings.state_dir, run_id) if case.decl.expect and case.decl.expect.requests_unchanged else []
    verdict = check_run(case.decl.expect, summary, receipts, answers, fixture.answers if fixture else None,
                        routed=case.mode == "routed")
    return CaseRun(run_id, verdict, _ms(t0), interrupted=summary.get("status") == "interrupted")


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)


def _problems(exc: ConfigError) -> str:
    from ..render.lint import format_text

    return format_text(exc.problems[:5]).strip()


def _answers(state_dir: str | None, run_id: str | None) -> list[dict]:
    from ..engine.launch import Launch

    launch = Launch(state_dir)
    try:
        return list(launch.open(create=False).model_answers_of(run_id)) if run_id else []
    finally:
        launch.close()


def record_fixture(case: Case, settings: CaseSettings) -> tuple[CaseRun, Fixture | None]:
    """``--record``: run ``case`` live and write its export to the case's fixture path (the live
    run's verdict, and the fixture written; None when the run could not start or the case has no
    fixture path)."""
    live = run_case(case, settings, live=True)
    if live.run_id is None or case.fixture_path is None:
        return live, None
    from ..engine.launch import Launch
    from ..engine.replay import export_records
    from .fixture import load_fixture

    launch = Launch(settings.state_dir)
    try:
        store = launch.open(create=False)
        run = store.get_run(live.run_id)
        lines = export_records(store, run)  # as `runs export` writes it, manifest first
    finally:
        launch.close()
    _write_lines(case.fixture_path, lines)
    return live, load_fixture(case.fixture_path)


def _write_lines(path: str, records: list[dict]) -> None:
    """The fixture written whole or not at all (a temporary file renamed over it)."""
    from .._json import dumps

    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as fh:
        for rec in records:
            fh.write(dumps(rec) + b"\n")
    os.replace(tmp, path)
