"""Findings a project chose to leave out of ``validate``'s report.

Three ways, each explicit: ``--ignore TL305,TL340`` on the command line; ``ignore = [...]`` (and
``strict = true``) under ``[tool.toolloop]`` in the nearest ``pyproject.toml`` above the current
folder; and a YAML comment ``# toolloop: ignore[TL342]`` on the line a finding points at.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from ..contract.problems import CODES, Problem
from ..errors import UsageError

_INLINE = re.compile(r"#\s*toolloop:\s*ignore\[([^\]]*)\]")
_SETTINGS_KEYS = ("ignore", "strict")


@dataclass(frozen=True)
class Settings:
    """``[tool.toolloop]`` of the nearest pyproject.toml (empty when there is none)."""

    ignore: frozenset[str] = frozenset()
    strict: bool = False
    source: str | None = None  # the pyproject.toml read, for messages


def parse_codes(text: str, where: str) -> frozenset[str]:
    """``TL305,TL340`` as a set of known codes; an unknown code is a usage error (a typo would
    otherwise silently ignore nothing)."""
    codes = [c.strip().upper() for c in text.split(",") if c.strip()]
    return _known(codes, where)


def _known(codes: Iterable[str], where: str) -> frozenset[str]:
    unknown = [c for c in codes if c not in CODES]
    if unknown:
        from ..contract.problems import did_you_mean

        near = did_you_mean(unknown[0], CODES)
        raise UsageError(f"{where}: unknown finding code '{unknown[0][:20]}'"
                         + (f" (did you mean '{near}'?)" if near else " (see docs/findings.md)"))
    return frozenset(codes)


def find_pyproject(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def load_settings(start: Path | None = None) -> Settings:
    """``[tool.toolloop]`` from the nearest pyproject.toml, walking up from ``start`` (the
    current folder). A malformed file or setting is a usage error naming the file."""
    path = find_pyproject((start or Path.cwd()).resolve())
    if path is None:
        return Settings()
    import tomllib

    from ..contract.registry import display_path

    shown = display_path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {shown}: {getattr(exc, 'strerror', None) or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{shown} is not valid TOML: {exc}") from None
    section = data.get("tool", {}).get("toolloop") if isinstance(data.get("tool"), dict) else None
    if section is None:
        return Settings(source=shown)
    where = f"{shown} [tool.toolloop]"
    if not isinstance(section, dict):
        raise UsageError(f"{where} must be a table")
    unknown = sorted(set(section) - set(_SETTINGS_KEYS))
    if unknown:
        raise UsageError(f"{where}: unknown key '{unknown[0][:40]}' (known: {', '.join(_SETTINGS_KEYS)})")
    ignore = section.get("ignore", [])
    if not isinstance(ignore, list) or not all(isinstance(c, str) for c in ignore):
        raise UsageError(f"{where}: 'ignore' must be a list of finding codes, e.g. ignore = [\"TL342\"]")
    strict = section.get("strict", False)
    if not isinstance(strict, bool):
        raise UsageError(f"{where}: 'strict' must be true or false")
    return Settings(_known([c.strip().upper() for c in ignore], where), strict, shown)


@dataclass
class Suppressor:
    """Drops ignored findings and counts them."""

    codes: frozenset[str] = frozenset()
    dropped: int = 0
    _lines: dict[str, list[str] | None] = field(default_factory=dict)

    def _inline_codes(self, p: Problem) -> set[str]:
        lines = self._lines.get(p.file, ...)
        if lines is ...:
            try:
                lines = Path(p.file).read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError):
                lines = None
            self._lines[p.file] = lines
        if not lines or not 1 <= p.line <= len(lines):
            return set()
        found = _INLINE.search(lines[p.line - 1])
        if found is None:
            return set()
        return {c.strip().upper() for c in found.group(1).split(",") if c.strip()}

    def keep(self, problems: list[Problem]) -> list[Problem]:
        out = []
        for p in problems:
            if p.code in self.codes or p.code in self._inline_codes(p):
                self.dropped += 1
            else:
                out.append(p)
        return out
