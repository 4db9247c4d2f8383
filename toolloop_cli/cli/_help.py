"""How help and usage lines show an argument: ``PATH...`` for one of several values, and a
required argument by its bare name (``toolloop run [OPTIONS] PLAN``), as Unix tools write it.

typer (0.29) shows an argument's name and the type of its value (``PLAN <path>``); for an
argument that takes a list it shows the list's Python type (``PATH <list[Path]>``), which says
nothing to someone at a shell, and drops the ``...`` its usage line has. Such an argument is
shown as ``PATH...`` here; every other parameter is shown as typer shows it. typer's usage line
puts a required argument in braces (``{PLAN}``), which a shell reader takes for a set of choices
(or brace expansion); it is written ``PLAN`` here, and an optional one stays ``[NAME]``.
"""

from __future__ import annotations

from typing import Any


def install() -> None:
    """Show list arguments as ``NAME...`` and required arguments without braces in usage lines.
    A typer without the methods this relies on is left as it is."""
    try:
        from typer.core import TyperArgument
    except ImportError:
        return
    own_name = getattr(TyperArgument, "_rich_display_name", None)
    own_type = getattr(TyperArgument, "display_type_rich", None)
    if hasattr(TyperArgument, "_usage_display_name"):  # the one place typer writes {PLAN}
        TyperArgument._usage_display_name = _usage_display_name
    if own_name is None or own_type is None or getattr(own_name, "_toolloop_list", False):
        return

    def _rich_display_name(self: Any) -> str:
        name: str = own_name(self)
        return name if self.nargs == 1 or name.endswith("...") else f"{name}..."

    def display_type_rich(self: Any, ctx: Any) -> str | None:
        return None if self.nargs != 1 else own_type(self, ctx)  # type: ignore[no-any-return]

    _rich_display_name._toolloop_list = True  # type: ignore[attr-defined]
    TyperArgument._rich_display_name = _rich_display_name
    TyperArgument.display_type_rich = display_type_rich


def _usage_display_name(self: Any) -> str:
    """An argument in a usage line: ``PLAN`` when required, ``[PLAN]`` when not, then ``...``
    when it takes several values."""
    name: str = self.display_name_raw
    if not self.required:
        name = f"[{name}]"
    return name if self.nargs == 1 else f"{name}..."
