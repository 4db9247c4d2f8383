"""Paths a person wrote (a flag, or a key of a registry or plan) as the file system sees them.

One rule for every such path: looking at it never raises. A path the file system cannot take at
all (a NUL byte, a name or a whole path longer than it allows, a loop of links, a folder that
may not be searched) is ``bad``, with the reason in words, so each caller reports it as it
reports a missing file: a finding at the key, or a usage error naming the flag.
"""

from __future__ import annotations

import errno
import os
import stat
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
    return Looked("other", "not a regular file or folder")
