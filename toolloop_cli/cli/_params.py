"""Command-line values converted without pydantic where the value is plain.

typer (0.29 and later) converts every parameter of the command being run through a pydantic
``TypeAdapter``, built the first time the parameter is read, even when the value is absent or
already of its type: importing pydantic and building some twenty adapters cost a command such as
``toolloop run`` about as much CPU as the rest of parsing. Here a parameter whose value is plain
(text for a text option, true or false for a flag, digits for a number, a word that is one of the choices, a path) is
converted as the adapter would convert it; any other value, or any value the plain conversion
doubts, goes to typer's own adapter, which decides whether it is taken. What is refused is said
as the parser says it, not in pydantic's words: a word that is not one of the choices (typer's
words without pydantic's "Value error, " before them: ``Invalid value for '--format' / '-f': 'xml'
is not one of 'auto', 'table', 'jsonl', 'json'.``), and a number that is not one or is out of
bounds (``Invalid value for '--max-concurrency' / '-j': 'many' is not a valid integer.``,
``... '--timeout': 'soon' is not a valid number of seconds.``, ``... '--port': 70000 is not in
the range 0<=x<=65535.``), where typer's adapter would say "Input should be a valid integer,
unable to parse string as an integer" (and click "'soon' is not a valid float.").

The same conversion as typer's adapters: text stays the same text, a number is ``int()`` or
``float()`` of its digits within the option's bounds, a path is its path type built from the text
and then checked by typer's own path check, a choice is typer's own choice match.
"""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path
from typing import Any, Callable

_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")
_FLOAT = re.compile(r"-?(?:0|[1-9][0-9]{0,14})(?:\.[0-9]{1,15})?")
_DOUBT = object()  # the plain conversion does not decide: typer's adapter does


class Refused(str):
    """The plain conversion's refusal of a value: the message a usage error shows."""


def _number(kind: type, info: Any) -> Callable[[Any, Any], Any]:
    if getattr(info, "clamp", False):
        return lambda value, ctx: _DOUBT
    low, high = info.min, info.max
    pattern = _INT if kind is int else _FLOAT

    def convert(value: Any, ctx: Any) -> Any:
        if type(value) is str and pattern.fullmatch(value):
            number = kind(value)
        elif type(value) is kind:
            number = value
        else:
            return _DOUBT
        if not _within(number, low, high):
            return _DOUBT
        return number

    return convert


def _number_refusal(kind: type, info: Any) -> Callable[[Any], Refused | None]:
    """What the parser says of text typer's adapter refused for a number option (None for a value
    that is not text: a default in the code, not something a user typed). A person reads what
    the option counts, not the type it is parsed as: seconds for an option whose metavar is
    ``SECONDS``, else a number; an integer is said as one, where a fraction is no answer."""
    word = "integer" if kind is int else (
        "number of seconds" if getattr(info, "metavar", None) == "SECONDS" else "number")

    def explain(value: Any) -> Refused | None:
        if type(value) is not str:
            return None
        try:
            number = kind(value.strip())
        except ValueError:
            number = None
        if number is not None and not _within(number, info.min, info.max):
            from typer._display import describe_number_range

            return Refused(f"{number} is not in the range {describe_number_range(info.min, info.max)}.")
        return Refused(f"{value!r} is not a valid {word}.")

    return explain


def _within(number: Any, low: Any, high: Any) -> bool:
    return (low is None or number >= low) and (high is None or number <= high)


def _text(value: Any, ctx: Any) -> Any:
    return value if type(value) is str else _DOUBT


def _flag(value: Any, ctx: Any) -> Any:
    return value if type(value) is bool else _DOUBT


def _choice(choices: tuple, case_sensitive: bool) -> Callable[[Any, Any], Any]:
    from typer._param_types import coerce_cli_choice

    def convert(value: Any, ctx: Any) -> Any:
        if not isinstance(value, (str, Enum)):
            return _DOUBT
        try:
            return coerce_cli_choice(value, choices=choices, case_sensitive=case_sensitive, ctx=ctx)
        except ValueError as exc:
            return Refused(exc)  # "'xml' is not one of 'text', 'json'.": what was given, what is allowed

    return convert


def _path(path_type: type, info: Any) -> Callable[[Any, Any], Any]:
    from typer._param_types import coerce_cli_path

    def convert(value: Any, ctx: Any) -> Any:
        if type(value) is str:
            value = path_type(value)  # what pydantic's path validation makes of text
        elif not isinstance(value, path_type):
            return _DOUBT
        try:
            return coerce_cli_path(value, info, path_type=path_type, ctx=ctx)
        except Exception:  # noqa: BLE001 - typer's adapter checks it again and says what is wrong
            return _DOUBT

    return convert


def _leaf(annotation: Any, info: Any) -> Callable[[Any, Any], Any] | None:
    """The plain conversion of one value of ``annotation``, or None where there is none."""
    if info.parser is not None or getattr(info, "formats", None):
        return None
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return _choice(tuple(annotation), info.case_sensitive)
    if annotation is str:
        return _text
    if annotation is bool:
        return _flag
    if annotation is int or annotation is float:
        return _number(annotation, info)
    if isinstance(annotation, type) and issubclass(annotation, Path):
        return _path(info.path_type or annotation, info)
    return None


class PlainParam:
    """A parameter's conversion: the plain one where it decides, typer's adapter otherwise
    (built only then)."""

    __slots__ = ("_descriptor", "_leaf", "_many", "_explain", "_full")

    def __init__(self, descriptor: Any, leaf: Callable[[Any, Any], Any], many: bool,
                 explain: Callable[[Any], Refused | None] | None = None) -> None:
        self._descriptor = descriptor
        self._leaf = leaf
        self._many = many
        self._explain = explain  # the parser's words for a value typer's adapter refuses
        self._full: Any = None

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        multi = param.multiple or param.nargs == -1
        if value is None:
            return () if multi else None  # as typer's own conversion: no adapter is asked
        if self._many and multi and isinstance(value, (list, tuple)):
            out = [self._leaf(item, ctx) for item in value]
            for item in out:
                if type(item) is Refused:
                    raise _refusal(item, param, ctx)
            if not any(item is _DOUBT for item in out):
                return out
        elif not self._many and not multi:
            one = self._leaf(value, ctx)
            if type(one) is Refused:
                raise _refusal(one, param, ctx)
            if one is not _DOUBT:
                return one
        return self._typers(value, param, ctx, multi)

    def _typers(self, value: Any, param: Any, ctx: Any, multi: bool) -> Any:
        """typer's conversion of the value; a refusal of one value in the parser's words where
        ``_explain`` has them."""
        if self._explain is None or multi:
            return self.full().coerce(value, param=param, ctx=ctx)
        from typer._click.exceptions import BadParameter

        try:
            return self.full().coerce(value, param=param, ctx=ctx)
        except BadParameter:
            said = self._explain(value)
            if said is None:
                raise
            raise _refusal(said, param, ctx) from None

    def full(self) -> Any:
        """typer's own conversion of this parameter (through its pydantic adapter)."""
        if self._full is None:
            from typer._coercion import build_runtime_param

            self._full = build_runtime_param(self._descriptor)
        return self._full


def _refusal(message: str, param: Any, ctx: Any) -> Exception:
    """The usage error typer's adapter raises for a wrong value (exit code 2), with ``message``."""
    from typer._click.exceptions import BadParameter

    return BadParameter(str(message), ctx=ctx, param=param)


def plain_param(descriptor: Any) -> PlainParam | None:
    """The conversion for a parameter typer describes with ``descriptor``, or None where typer's
    own is the only one (files, tuples, dates, custom parsers, clamped numbers)."""
    if descriptor.file_annotation is not None:
        return None
    annotation, info = descriptor.annotation, descriptor.parameter_info
    many = False
    origin = getattr(annotation, "__origin__", None)
    if origin is list:
        args = getattr(annotation, "__args__", ())
        if len(args) != 1:
            return None
        annotation, many = args[0], True
    elif origin is not None:
        return None
    leaf = _leaf(annotation, info)
    if leaf is None:
        return None
    numeric = (annotation is int or annotation is float) and not getattr(info, "clamp", False)
    return PlainParam(descriptor, leaf, many, _number_refusal(annotation, info) if numeric else None)


def install() -> None:
    """Have typer's parameters convert plain values without pydantic. A typer without the hook
    this relies on (before 0.29) is left as it is."""
    try:
        from typer.core import _TyperParameter
    except ImportError:
        return
    own = getattr(_TyperParameter, "get_runtime_param", None)
    if own is None or getattr(own, "_toolloop_plain", False):
        return

    def get_runtime_param(self: Any) -> Any:
        if self._runtime_param is None:
            self._runtime_param = plain_param(self.type_descriptor) or own(self)
        return self._runtime_param

    get_runtime_param._toolloop_plain = True  # type: ignore[attr-defined]
    _TyperParameter.get_runtime_param = get_runtime_param
