"""Sandboxed tools (``isolation: sandbox``) as the contract sees them: the ``sandbox`` block
checked and compiled, whether this machine can make a sandbox at all, and what a receipt says was
applied (``Sandbox.applied``). Whether a plan may use a tool, and what its receipt says, are asked
through ``isolation.py``, so that runs of tools without a sandbox do not import this module.

Whether a sandbox can be made is found out by making one, once per process: ``bwrap``
(bubblewrap) runs ``true`` with the same namespaces, mounts and dropped capabilities a
sandboxed worker gets (``bwrap_args``). A missing ``bwrap``, a kernel that refuses
user namespaces or a container that forbids mounts all fail that probe, and the reason is kept:
admission refuses a plan that needs the sandbox with it, receipts of a ``required: false`` tool
carry it as ``{kind: "none", reason}``. The probe's answer is the one the executor acts on, so a
receipt never claims a sandbox the call did not get.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from dataclasses import dataclass
from typing import Any

from .._text import quoted

#: the bwrap program to use instead of ``bwrap`` on PATH. Meant for tests and unusual installs: a
#: path that is not a program makes every sandbox unavailable, as on a machine without bubblewrap.
BWRAP_ENV = "TOOLLOOP_BWRAP"
PROBE_LIMIT_S = 20.0

HOW_TO_FIX = ("install bubblewrap (apt-get install bubblewrap) and allow user namespaces (sysctl"
              " kernel.unprivileged_userns_clone=1; on Ubuntu also kernel.apparmor_restrict_unprivileged_userns=0;"
              " in a container, run it with namespaces allowed), or set sandbox: {required: false} to run the"
              " tool as isolation: process, unconfined")

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ALWAYS_SET = ("PATH", "HOME")


@dataclass(frozen=True, slots=True)
class Sandbox:
    """A tool's sandbox, compiled: ``writable`` as declared (relative to app_root), ``paths`` the
    same folders resolved."""

    network: str
    writable: tuple[str, ...]
    paths: tuple[str, ...]
    env: tuple[str, ...]
    required: bool

    def applied(self) -> dict:
        """The receipt's ``isolation`` when the sandbox is made."""
        return {"kind": "bwrap", "network": self.network, "writable": list(self.writable), "env": list(self.env)}


def bwrap_args(bwrap: str, network: str) -> list[str]:
    """The namespaces and mounts of every sandbox: new user, PID, IPC, UTS, cgroup and (unless
    ``network`` is ``host``) network namespaces; every capability dropped, so that root inside
    cannot remount the file system writable; everything read-only but a private ``/tmp`` (and
    the ``--bind`` mounts the caller adds); the sandbox dies with the process that started it."""
    args = [bwrap, "--unshare-all"]
    if network == "host":
        args.append("--share-net")
    return args + ["--die-with-parent", "--cap-drop", "ALL", "--ro-bind", "/", "/", "--dev", "/dev",
                   "--proc", "/proc", "--tmpfs", "/tmp"]


def find_bwrap() -> tuple[str | None, str | None]:
    """The bwrap program, or why there is none."""
    given = os.environ.get(BWRAP_ENV)
    if given:
        if os.path.isfile(given) and os.access(given, os.X_OK):
            return given, None
        return None, f"{BWRAP_ENV} names {quoted(given)}, which is not a program"
    found = shutil.which("bwrap")
    if found is None:
        return None, "bwrap (bubblewrap) is not installed"
    return found, None


_PROBED: dict[str, str | None] = {}
_FOUND: dict[tuple[str | None, str | None], tuple[str | None, str | None]] = {}


def availability() -> tuple[str | None, str | None]:
    """``(bwrap, None)`` when a sandbox can be made here, else ``(None, why)``. The probe runs once
    per bwrap program and process; the answer is asked for on every call and every receipt of a
    sandboxed tool, so the lookup is kept too (per BWRAP_ENV and PATH)."""
    if not sys.platform.startswith("linux"):
        return None, "sandboxes are made with Linux namespaces, and this is not Linux"
    where = (os.environ.get(BWRAP_ENV), os.environ.get("PATH"))
    found = _FOUND.get(where)
    if found is None:
        found = _FOUND[where] = find_bwrap()
    bwrap, why = found
    if bwrap is None:
        return None, why
    if bwrap not in _PROBED:
        _PROBED[bwrap] = _probe(bwrap)
    why = _PROBED[bwrap]
    return (bwrap, None) if why is None else (None, why)


def _probe(bwrap: str) -> str | None:
    import subprocess

    # a program outside /tmp (an interpreter in a folder under /tmp is hidden until the worker's
    # own mounts bind it back), from a folder that exists in every sandbox
    program = [shutil.which("true") or "/bin/true"]
    argv = bwrap_args(bwrap, "none") + ["--chdir", "/", "--", *program]
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              env={"PATH": os.environ.get("PATH", os.defpath)}, timeout=PROBE_LIMIT_S)
    except subprocess.TimeoutExpired:
        return f"bwrap did not make a test sandbox within {PROBE_LIMIT_S:g}s"
    except OSError as exc:
        return f"bwrap ({bwrap}) cannot be started: {exc.strerror or exc}"
    if proc.returncode != 0:
        lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        said = lines[0][:300] if lines else f"exit code {proc.returncode}"
        return f"bwrap could not make a sandbox here: {said}"
    return None


def compile_sandbox(tid: str, t: Any, at: tuple, root: str | None, col: Any, kind: str,
                    asynchronous: bool) -> Sandbox | None:
    """The tool's ``isolation`` and ``sandbox`` keys checked (TL318, TL319, and the TL380 warning
    when this machine cannot make the sandbox); the compiled sandbox, or None."""
    if t.isolation != "sandbox":
        if t.sandbox is not None:
            col.add("TL319", f"tool {quoted(tid)} has a sandbox block but isolation: {t.isolation}", at + ("sandbox",),
                    "set isolation: sandbox, or remove the sandbox block", at_key=True)
        return None
    what = {"mcp": "an MCP tool (its server is a program of its own)", "plan": "a plan tool (a child run)"}.get(kind)
    if what is None and asynchronous:
        what = "an async callable"
    if what is not None:
        col.add("TL318", f"isolation: sandbox applies to sync callables only, and tool {quoted(tid)} is {what}",
                at + ("isolation",), "remove isolation: sandbox" + (", or make the callable sync" if asynchronous else ""))
        return None
    decl = t.sandbox
    network, writable, env, required = ("none", [], [], True) if decl is None else (
        decl.network, decl.writable, decl.env, decl.required)
    paths = _writable_paths(tid, writable, at + ("sandbox", "writable"), root, col)
    for i, name in enumerate(env):
        if not _NAME.match(name):
            col.add("TL319", f"sandbox.env of tool {quoted(tid)} lists {quoted(name)}, which is not a variable name",
                    at + ("sandbox", "env", i), "list variable names such as LANG or API_BASE_URL")
        elif name in ALWAYS_SET:
            col.add("TL319", f"sandbox.env of tool {quoted(tid)} lists {name}, which a sandbox always sets"
                    + (" (to the private /tmp)" if name == "HOME" else " (toolloop's own)"),
                    at + ("sandbox", "env", i), f"remove {name} from sandbox.env")
    _bwrap, why = availability()
    if why is not None:
        then = ("its calls run without one, as isolation: process (receipts say isolation kind 'none')"
                if not required else "a plan that uses it is refused")
        col.add("TL380", f"tool {quoted(tid)} asks for a sandbox, and none can be made on this machine: {why}; {then}",
                at + ("isolation",), HOW_TO_FIX, level="warning")
    if paths is None:
        return None
    return Sandbox(network, tuple(writable), tuple(paths), tuple(env), required)


def _writable_paths(tid: str, writable: list[str], at: tuple, root: str | None, col: Any) -> list[str] | None:
    """The writable folders resolved; None (with findings) when one is not a folder below app_root."""
    if root is None:
        return None  # app_root's own finding says why
    paths: list[str] = []
    ok = True
    real_root = os.path.realpath(root)
    for i, entry in enumerate(writable):
        where = at + (i,)
        if os.path.isabs(entry):
            col.add("TL319", f"sandbox.writable of tool {quoted(tid)} lists {quoted(entry)}, an absolute path",
                    where, "list folders relative to app_root, e.g. out")
            ok = False
            continue
        try:
            path = os.path.realpath(os.path.join(real_root, entry))
            is_dir = os.path.isdir(path)
        except (OSError, ValueError):  # a name too long for the file system, a NUL byte
            path, is_dir = os.path.join(real_root, entry), False
        if os.path.commonpath([real_root, path]) != real_root:
            col.add("TL319", f"sandbox.writable of tool {quoted(tid)} lists {quoted(entry)}, which lies outside"
                    f" app_root ({real_root})", where, "list folders below app_root")
            ok = False
        elif not is_dir:
            col.add("TL319", f"sandbox.writable of tool {quoted(tid)} lists {quoted(entry)}, which is not a folder"
                    f" ({path})", where, "create the folder (it is relative to app_root), or fix the name")
            ok = False
        else:
            paths.append(path)
    return paths if ok else None
