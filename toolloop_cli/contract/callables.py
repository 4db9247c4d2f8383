"""Resolving ``module:attribute`` references with the App's root on ``sys.path``."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import sys
from dataclasses import dataclass
from typing import Any, Callable

from .._text import error_text, excerpt, quoted
from .problems import did_you_mean


@dataclass(frozen=True)
class Resolved:
    fn: Callable[..., Any] | None
    code: str | None = None  # finding code when resolution failed
    message: str = ""
    hint: str = ""


def ensure_on_path(root: str) -> None:
    if root not in sys.path:
        sys.path.insert(0, root)


def resolve(ref: str, app_root: str) -> Resolved:
    """Resolve a public ``module:attr.path`` reference; failures are findings, never tracebacks."""
    if ref.count(":") != 1:
        return Resolved(None, "TL304", f"callable {quoted(ref)} is not 'module:attribute'", "write e.g. 'app.tools:run'")
    module_name, attr_path = ref.split(":")
    segments_mod = module_name.split(".")
    segments_attr = attr_path.split(".")
    if not module_name or not attr_path or any(not s.isidentifier() for s in segments_mod + segments_attr):
        return Resolved(None, "TL304", f"callable {quoted(ref)} is not 'module:attribute'", "write e.g. 'app.tools:run'")
    private = [s for s in segments_mod + segments_attr if s.startswith("_")]
    if private:
        return Resolved(
            None, "TL305", f"callable {quoted(ref)} reaches a private name {quoted(private[0])}",
            "expose a public function; no segment of the path may start with '_'",
        )
    ensure_on_path(app_root)
    try:
        # an App module that prints while importing must not corrupt machine-readable output
        with contextlib.redirect_stdout(sys.stderr):
            obj: Any = importlib.import_module(module_name)
    except BaseException as exc:  # noqa: BLE001 - user code at import time; SystemExit included
        if isinstance(exc, KeyboardInterrupt):
            raise
        return _import_failure(module_name, app_root, exc)
    for seg in segments_attr:
        try:
            obj = getattr(obj, seg)
        except AttributeError:
            try:
                names = [n for n in dir(obj) if not n.startswith("_")]
            except Exception:  # noqa: BLE001 - App objects may have any __dir__
                names = []
            near = did_you_mean(seg, names)
            return Resolved(
                None, "TL307", f"{quoted(ref)}: {quoted(seg)} is not an attribute of {_describe(obj)}",
                f"did you mean {quoted(near)}?" if near else "check the spelling of the function name",
            )
        except Exception as exc:  # noqa: BLE001 - an App's __getattr__ may raise anything
            return Resolved(
                None, "TL307", f"{quoted(ref)}: reading {quoted(seg)} raised {error_text(exc)}",
                "fix the attribute lookup in the module",
            )
    if not callable(obj):
        return Resolved(
            None, "TL308", f"{quoted(ref)} is not callable (it is {_article(type(obj).__name__)})",
            "point at a function, a class or an object with __call__",
        )
    return Resolved(obj)


def _article(name: str) -> str:
    return ("an " if name[:1].lower() in "aeiou" else "a ") + name


def _describe(obj: Any) -> str:
    if inspect.ismodule(obj):
        return f"module {quoted(obj.__name__)}"
    return quoted(getattr(obj, "__qualname__", type(obj).__name__))


def _shown(filename: str) -> str:
    import os

    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel


def _import_failure(module_name: str, app_root: str, exc: BaseException) -> Resolved:
    missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    if missing is not None and (module_name == missing or module_name.startswith(missing + ".")):
        return Resolved(
            None, "TL306", f"cannot import module {quoted(module_name)}: no module named {quoted(missing)} under app_root",
            f"check the spelling, or set app_root to the folder that holds {quoted(missing.split('.')[0])} "
            f"(now {excerpt(app_root)})",
        )
    where = ""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is not None:
        where = f" (at {_shown(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno})"
    detail = error_text(exc)
    return Resolved(
        None, "TL306", f"importing module {quoted(module_name)} failed: {detail}{where}",
        "fix the error in the module; it runs when the registry is loaded",
    )


def is_async(fn: Callable[..., Any]) -> bool:
    target = getattr(fn, "__call__", None) if not inspect.isroutine(fn) and not inspect.isclass(fn) else fn
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(target)
