"""Reading a YAML file (a registry or a plan) into data, its source map and its load findings."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import Any, Callable

from .._text import clip, excerpt, quoted
from .problems import Collector, Problem, json_path
from .source import LoadIssue, SourceMap, YamlRejected, load_yaml


def display_path(path: str | os.PathLike) -> str:
    """The path as a user should see it: relative to the current folder when below it."""
    p = FsPath(path)
    try:
        return str(p.resolve().relative_to(FsPath.cwd().resolve()))
    except (ValueError, OSError):  # not below the current folder, or not a name the system takes
        return str(p)


@dataclass
class LoadedDoc:
    data: Any
    smap: SourceMap
    collector: Collector
    issues: list[LoadIssue] = field(default_factory=list)


def load_document(path: str | os.PathLike, recode: Callable[[LoadIssue], LoadIssue] | None = None) -> LoadedDoc:
    """Read and parse a YAML file; load failures become findings (TL101, TL102, TL104...).

    ``recode`` may turn a generic load issue into a more specific one (a duplicate tool id
    rather than a duplicate key) before it becomes a finding.
    """
    shown = display_path(path)
    smap = SourceMap(shown)
    col = Collector(smap)
    try:
        text = FsPath(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        col.add("TL101", f"file not found: {excerpt(str(path))}", hint="check the path")
        return LoadedDoc(None, smap, col)
    except IsADirectoryError:
        col.add("TL101", f"cannot read {excerpt(str(path))}: it is a folder", hint="name a YAML file")
        return LoadedDoc(None, smap, col)
    except UnicodeDecodeError as exc:
        col.add("TL101", f"cannot read {excerpt(str(path))}: not UTF-8 text (byte {exc.start})", hint="save the file as UTF-8")
        return LoadedDoc(None, smap, col)
    except OSError as exc:
        col.add("TL101", f"cannot read {excerpt(str(path))}: {exc.strerror or clip(str(exc))}", hint="check the file exists and is readable")
        return LoadedDoc(None, smap, col)
    except ValueError:  # a NUL byte in the name
        col.add("TL101", f"cannot read {excerpt(str(path))}: not a file name", hint="check the path")
        return LoadedDoc(None, smap, col)
    try:
        data, smap, issues = load_yaml(text, shown)
    except YamlRejected as rej:
        i = rej.issue
        col.problems.append(Problem(i.code, i.message, shown, i.line, i.col, json_path(i.path), i.hint))
        return LoadedDoc(None, smap, col)
    if recode is not None:
        issues = [recode(i) for i in issues]
    col = Collector(smap)
    for i in issues:
        col.problems.append(Problem(i.code, i.message, shown, i.line, i.col, json_path(i.path), i.hint))
    if not isinstance(data, dict):
        # text is not quoted: a file given by mistake may be anything (a .env file, a password list)
        found = ("a list" if isinstance(data, list) else f"text ({len(data)} characters)" if isinstance(data, str)
                 else f"the single value {quoted(data)}")
        col.add("TL106", f"the document must be a mapping at the top level, found {found}",
                hint="start with 'version: 1'")
        return LoadedDoc(None, smap, col, issues)
    return LoadedDoc(data, smap, col, issues)
