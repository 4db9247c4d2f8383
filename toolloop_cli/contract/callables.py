"""Resolving ``module:attribute`` references with the App's root on ``sys.path``."""

from __future__ import annotations

import importlib
import inspect
import sys
from dataclasses import dataclass
from typing import Any, Callable


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
        return Resolved(None, "TL304", f"callable '{ref}' is not 'module:attribute'", "write e.g. 'app.tools:run'")
    module_name, attr_path = ref.split(":")
    segments_mod = module_name.split(".")
    segments_attr = attr_path.split(".")
    if not module_name or not attr_path or any(not s.isidentifier() for s in segments_mod + segments_attr):
        return Resolved(None, "TL304", f"callable '{ref}' is not 'module:attribute'", "write e.g. 'app.tools:run'")
    private = [s for s in segments_mod + segments_attr if s.startswith("_")]
    if private:
        return Resolved(
            None, "TL305", f"callable '{ref}' reaches a private name '{private[0]}'",
            "expose a public function (no segment may start with '_')",
        )
    ensure_on_path(app_root)
    try:
        obj: Any = importlib.import_module(module_name)
    except BaseException as exc:  # noqa: BLE001 - user code at import time; SystemExit included
        if isinstance(exc, KeyboardInterrupt):
            raise
        return Resolved(
            None, "TL306", f"cannot import module '{module_name}': {type(exc).__name__}: {exc}",
            f"check the module exists under app_root ({app_root})",
        )
    for seg in segments_attr:
        try:
            obj = getattr(obj, seg)
        except AttributeError:
            return Resolved(None, "TL307", f"'{ref}': no attribute '{seg}'", "check the spelling of the function name")
    if not callable(obj):
        return Resolved(None, "TL308", f"'{ref}' is a {type(obj).__name__}, not a callable", "point at a function")
    return Resolved(obj)


def is_async(fn: Callable[..., Any]) -> bool:
    target = getattr(fn, "__call__", None) if not inspect.isroutine(fn) and not inspect.isclass(fn) else fn
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(target)
