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
    #: a third-party module the App's module imports and that is not installed (one finding
    #: for every tool that needs it, rather than one per tool)
    missing: str | None = None


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
    if missing is not None and missing.split(".")[0] != module_name.split(".")[0]:
        top = missing.split(".")[0]
        return Resolved(
            None, "TL306", f"module '{top}' is not installed, and the App's module '{module_name}' imports it",
            f"install the package that provides '{top}' where toolloop runs (the same environment, or the"
            " pre-commit hook's additional_dependencies)", missing=top,
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


# Packages that run on trio as well as asyncio: code using them is not taken for asyncio-only.
_EITHER_LOOP = frozenset({"trio", "anyio", "sniffio"})


def detect_runtime(fn: Callable[..., Any]) -> tuple[str, tuple[str, ...]]:
    """The event loop an async callable needs, ``trio`` or ``asyncio``, and, when it is taken
    for trio, the packages it calls that are built on asyncio alone (a likely mistake: those
    need the ``asyncio_tool`` marker).

    An explicit marker wins (``__toolloop_runtime__``, set by ``asyncio_tool``); otherwise a
    coroutine whose code names the asyncio module (or anything imported from it) and not trio
    runs on asyncio.
    """
    marked = getattr(fn, "__toolloop_runtime__", None)
    if marked in ("trio", "asyncio"):
        return marked, ()
    target = _code_owner(fn)
    libs, used = _names_used(target)
    if "asyncio" in libs and "trio" not in libs:
        return "asyncio", ()
    own = (getattr(target, "__module__", None) or "").split(".")[0]
    return "trio", tuple(sorted(p for p in used - {own, "asyncio", "builtins"} if _asyncio_only(p)))


def _code_owner(fn: Callable[..., Any]) -> Any:
    """The function whose code runs when ``fn`` is called (through wrappers, partials, methods
    and callable objects)."""
    import functools

    target: Any = inspect.unwrap(fn)
    while isinstance(target, functools.partial):
        target = inspect.unwrap(target.func)
    if inspect.ismethod(target):
        return target.__func__
    if not inspect.isfunction(target):
        return getattr(type(target), "__call__", None)
    return target


def _owner(obj: Any) -> Any:
    return obj.__name__ if inspect.ismodule(obj) else getattr(obj, "__module__", None)


def _names_used(target: Any) -> tuple[set[str], set[str]]:
    """The top-level packages the code (and its nested code) names, and those of the objects
    its global names resolve to."""
    import dis
    import types

    code = getattr(target, "__code__", None)
    env = getattr(target, "__globals__", {})
    libs: set[str] = set()
    used: set[str] = set()  # packages of the objects the code names (resolved names only)
    todo = [code] if code is not None else []
    while todo:
        c = todo.pop()
        todo.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
        for name in c.co_names:
            owner = _owner(env.get(name))
            libs.add((owner if isinstance(owner, str) else name).split(".")[0])
        for ins in dis.get_instructions(c):
            if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(ins.argval, str):
                obj = env.get(ins.argval)
                owner = _owner(obj)
                if obj is not None and isinstance(owner, str):
                    used.add(owner.split(".")[0])
    return libs, used


def _asyncio_only(package: str) -> bool:
    """Whether an imported package is built on asyncio and never mentions trio, anyio or sniffio."""
    if package in _EITHER_LOOP or package in sys.stdlib_module_names:
        return False
    uses_asyncio = False
    for name, module in list(sys.modules.items()):
        if module is None or (name != package and not name.startswith(package + ".")):
            continue
        for value in list(vars(module).values()):
            if inspect.ismodule(value):
                top = value.__name__.split(".")[0]
                if top in _EITHER_LOOP:
                    return False
                uses_asyncio = uses_asyncio or top == "asyncio"
    return uses_asyncio
