"""Paths a person wrote (a flag, or a key of a registry or plan) as the file system sees them,
and the import path callables are resolved on.

One rule for every such path: looking at it never raises. A path the file system cannot take at
all (a NUL byte, a name or a whole path longer than it allows, a loop of links, a folder that
may not be searched) is ``bad``, with the reason in words, so each caller reports it as it
reports a missing file: a finding at the key, or a usage error naming the flag. Standard library
only: the command line and worker processes import it before anything else.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from dataclasses import dataclass
from typing import Literal

Kind = Literal["file", "folder", "other", "missing", "bad"]


@dataclass(frozen=True, slots=True)
class Looked:
    """What is at a path: a ``file``, a ``folder``, ``other`` (a device, a socket, ...), nothing
    (``missing``), or a path that cannot be looked at (``bad``, ``why`` says how)."""

    kind: Kind
    why: str = ""


def look_at(path: str | os.PathLike) -> Looked:
    """What the file system has at ``path`` (symbolic links followed); never raises."""
    try:
        st = os.stat(path)
    except ValueError:  # os.stat refuses a name with a NUL byte before asking the system
        return Looked("bad", "the path holds a NUL byte, which no file name can")
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return Looked("missing", "not found")
        if exc.errno == errno.ENAMETOOLONG:
            return Looked("bad", "the path is longer than the file system takes")
        return Looked("bad", f"the path cannot be looked at ({exc.strerror or type(exc).__name__})")
    if stat.S_ISREG(st.st_mode):
        return Looked("file")
    if stat.S_ISDIR(st.st_mode):
        return Looked("folder")
    return Looked("other", "it is not a regular file (a device, a pipe or a socket)")


def forget_start_folder() -> None:
    """Take off ``sys.path`` the folder Python put first for how it was started: the current
    folder for ``python -m toolloop_cli``, the script's folder for the ``toolloop`` script. Either
    way callables then resolve from ``app_root`` (and what is installed) only, so a registry
    passes or fails alike however toolloop is started. ``python -P`` adds neither."""
    if sys.flags.safe_path or not sys.path:
        return
    first = sys.path[0]
    started: set[str] = {""}
    try:
        started.add(os.getcwd())
    except OSError:
        pass  # the current folder is gone: it cannot be imported from either
    if sys.argv and sys.argv[0] not in ("", "-c", "-m"):
        script = os.path.dirname(os.path.abspath(sys.argv[0]))
        started.update((script, os.path.realpath(script)))
    if first in started or os.path.realpath(first or ".") in started:
        del sys.path[0]
