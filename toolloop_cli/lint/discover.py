"""Which files ``validate`` checks: registries and plans named on the command line, or found in
folders. A registry has ``subagents``; a plan has ``mode`` or ``subagent``. In a folder only
``*.yml`` / ``*.yaml`` files with a top-level ``version`` of either shape are taken; the other YAML
files there (CI workflows, compose files) are passed over. A file named on the command line that
is neither is a finding."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .._paths import look_at
from .._text import excerpt
from ..contract.problems import Problem
from ..errors import UsageError

SUFFIXES = (".yml", ".yaml")
#: folders never searched: tool state, virtualenvs, version control, caches
SKIPPED_DIRS = frozenset({"node_modules", "__pycache__", "site-packages"})
_TOP_KEY = re.compile(r"^([A-Za-z_][\w-]*)[ \t]*:", re.MULTILINE)


@dataclass(frozen=True)
class Target:
    path: Path
    kind: str  # registry | plan | suite


@dataclass
class Discovery:
    targets: list[Target] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)  # named files that are neither kind


def kind_of(keys: set[str]) -> str | None:
    """``registry``, ``plan``, ``suite`` or None, from a document's top-level keys."""
    if "subagents" in keys:
        return "registry"
    if "mode" in keys or "subagent" in keys:
        return "plan"
    if "cases" in keys:  # a suite (loading it checks that it says kind: suite)
        return "suite"
    return None


def _top_keys(path: Path) -> tuple[set[str] | None, str | None]:
    """The top-level keys of a YAML file (None when it cannot be read as a mapping), and why not."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"cannot be read ({getattr(exc, 'strerror', None) or exc})"
    import yaml

    from ..contract.source import compose, remember

    try:
        node = compose(text)
        remember(text, node)  # loading the file next takes this graph instead of parsing it again
    except yaml.YAMLError:
        # not valid YAML: judge by the keys written at the start of a line, so that a registry
        # or plan with a syntax error is still checked (and its error reported)
        return set(_TOP_KEY.findall(text)), None
    if not isinstance(node, yaml.MappingNode):
        return None, "is not a mapping"
    return {k.value for k, _ in node.value if isinstance(k, yaml.ScalarNode)}, None


def _display(path: Path) -> str:
    from ..contract.registry import display_path

    return display_path(path)


def _named(path: Path, found: Discovery) -> None:
    keys, why = _top_keys(path)
    if keys is None and why is not None and why.startswith("cannot"):
        found.targets.append(Target(path, "registry"))  # loading it reports why it cannot be read (TL101)
        return
    kind = kind_of(keys) if keys is not None else None
    if kind is not None:
        found.targets.append(Target(path, kind))
        return
    what = ("it has no 'subagents', so it is not a registry, no 'mode' or 'subagent', so it is not a plan, and no"
            " 'cases', so it is not a suite" if keys is not None else f"it {why}, so it is none of them")
    found.problems.append(Problem("TL106", f"this file is neither a registry, a plan nor a suite: {what}", _display(path),
                                  hint="name registries, plans, suites, or folders holding them"))


def _walk(folder: Path) -> list[Path]:
    out = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            if entry.name not in SKIPPED_DIRS and not (entry / "pyvenv.cfg").exists():
                out += _walk(entry)
        elif entry.suffix in SUFFIXES and entry.is_file():
            out.append(entry)
    return out


def discover(paths: list[Path]) -> Discovery:
    """Registries and plans to check, in the order given (a folder's files sorted by path).
    Raises ``UsageError`` for a path that does not exist or a folder holding neither kind."""
    found = Discovery()
    seen: set[Path] = set()
    for path in paths:
        looked = look_at(path)
        if looked.kind == "folder":
            before = len(found.targets)
            for file in _walk(path):
                keys, _ = _top_keys(file)
                kind = kind_of(keys) if keys is not None and "version" in keys else None
                if kind is not None and file.resolve() not in seen:
                    seen.add(file.resolve())
                    found.targets.append(Target(file, kind))
            if len(found.targets) == before and not any(t.path.resolve().is_relative_to(path.resolve())
                                                        for t in found.targets):
                raise UsageError(f"folder {path} holds no registry or plan (*.yml or *.yaml files with 'version:'"
                                 " and 'subagents:', or 'mode:' and 'subagent:')")
        elif looked.kind == "file":
            if path.resolve() not in seen:
                seen.add(path.resolve())
                _named(path, found)
        elif looked.kind == "other":
            raise UsageError(f"not a regular file or folder: {excerpt(str(path))}")
        elif looked.kind == "bad":
            raise UsageError(f"{excerpt(str(path))}: {looked.why}")
        else:
            raise UsageError(f"not found: {excerpt(str(path))}")
    return found
