"""Control envelopes: compiled with the registry, applied to results.

The envelope reads a producer-owned result only through the field names the registry maps;
nothing here knows any field by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._text import quoted

if TYPE_CHECKING:
    from .models import EnvelopeDecl


@dataclass(frozen=True, slots=True)
class Envelope:
    role: str
    status_field: str
    continue_statuses: frozenset[str]
    stop_statuses: frozenset[str]
    diagnosis: tuple[tuple[str, str], ...]  # (reported name, result field)
    diagnosis_fields: tuple[str, ...]
    handoff_fields: tuple[str, ...]

    def read(self, result: Any) -> tuple[dict | None, str | None]:
        """(envelope reading, problem). A problem means the result is ``invalid_output``."""
        if not isinstance(result, dict):
            return None, "result is not an object, so the control envelope cannot read it"
        if self.status_field not in result:
            return None, f"result has no {quoted(self.status_field)} (the envelope's status_field)"
        status = result[self.status_field]
        if not isinstance(status, str):
            return None, f"{quoted(self.status_field)} must be a string, found {type(status).__name__}"
        if status in self.continue_statuses:
            decision = "continue"
        elif status in self.stop_statuses:
            decision = "stop"
        else:
            return None, (
                f"producer status {quoted(status)} is in neither continue_statuses nor stop_statuses"
            )
        diagnosis = None
        if self.diagnosis:
            diagnosis = {name: result.get(field) for name, field in self.diagnosis}
            diagnosis["fields"] = {f: result.get(f) for f in self.diagnosis_fields}
        handoff = {f: result[f] for f in self.handoff_fields if f in result}
        return {"status": status, "decision": decision, "diagnosis": diagnosis, "handoff": handoff}, None


def compile_envelope(decl: EnvelopeDecl, output_schema: Any) -> tuple[Envelope | None, list[tuple[tuple, str]]]:
    """Compile; returns the envelope or the problems (path below ``control_envelope``, message)."""
    g = decl.graph
    problems = _status_problems(g)
    mapped, diag = _mapped_fields(decl)
    problems += _mapped_twice(mapped)
    if isinstance(output_schema, dict) and output_schema.get("additionalProperties") is False:
        problems += _not_declared(decl, mapped, set((output_schema.get("properties") or {}).keys()))
    if problems:
        return None, problems
    return (
        Envelope(
            role=decl.role,
            status_field=g.status_field,
            continue_statuses=frozenset(g.continue_statuses),
            stop_statuses=frozenset(g.stop_statuses),
            diagnosis=diag,
            diagnosis_fields=tuple(decl.diagnosis.fields) if decl.diagnosis else (),
            handoff_fields=tuple(decl.handoff_fields),
        ),
        [],
    )


def _status_problems(g: Any) -> list[tuple[tuple, str]]:
    """No status to read, or a status both continuing and stopping."""
    problems: list[tuple[tuple, str]] = []
    if not g.continue_statuses and not g.stop_statuses:
        problems.append((("graph",), "continue_statuses and stop_statuses are both empty, so no status can be read"))
    for i, status in enumerate(g.stop_statuses):
        if status in g.continue_statuses:
            problems.append((("graph", "stop_statuses", i),
                             f"status {quoted(status)} is in both continue_statuses and stop_statuses"))
    return problems


def _mapped_fields(decl: EnvelopeDecl) -> tuple[dict[str, tuple[tuple, str]], tuple[tuple[str, str], ...]]:
    """Each role's output field (role -> (where, field)), and the diagnosis' (name, field) pairs."""
    g = decl.graph
    mapped: dict[str, tuple[tuple, str]] = {"graph.status_field": (("graph", "status_field"), g.status_field)}
    diag: tuple[tuple[str, str], ...] = ()
    if decl.diagnosis is not None:
        d = decl.diagnosis
        diag = (
            ("ready", d.ready_field),
            ("reason_code", d.reason_code_field),
            ("failure_kind", d.failure_kind_field),
            ("facts", d.facts_field),
        )
        for name, field in diag:
            mapped[f"diagnosis.{name}_field"] = (("diagnosis", f"{name}_field"), field)
    return mapped, diag


def _mapped_twice(mapped: dict[str, tuple[tuple, str]]) -> list[tuple[tuple, str]]:
    problems: list[tuple[tuple, str]] = []
    seen: dict[str, str] = {}
    for role, (where, field) in mapped.items():
        if field in seen:
            problems.append((where, f"{quoted(field)} is mapped twice ({seen[field]} and {role}): ambiguous"))
        else:
            seen[field] = role
    return problems


def _not_declared(decl: EnvelopeDecl, mapped: dict[str, tuple[tuple, str]], declared: set[str]) -> list[tuple[tuple, str]]:
    """The fields the envelope reads that a closed output schema does not declare."""
    problems = [(where, f"{role} {quoted(field)} is not a property of the closed output_schema")
                for role, (where, field) in mapped.items() if field not in declared]
    if decl.diagnosis is not None:
        problems += [(("diagnosis", "fields", i), f"diagnosis field {quoted(f)} is not a property of the closed output_schema")
                     for i, f in enumerate(decl.diagnosis.fields) if f not in declared]
    problems += [(("handoff_fields", i), f"handoff field {quoted(f)} is not a property of the closed output_schema")
                 for i, f in enumerate(decl.handoff_fields) if f not in declared]
    return problems
