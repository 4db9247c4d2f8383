"""How help shows an argument that takes several values: ``PATH...``, as its usage line does.

typer (0.29) shows an argument's name and the type of its value (``PLAN <path>``); for an
argument that takes a list it shows the list's Python type (``PATH <list[Path]>``), which says
nothing to someone at a shell, and drops the ``...`` its usage line has. Such an argument is
shown as ``PATH...`` here; every other parameter is shown as typer shows it.
"""

from __future__ import annotations

from typing import Any


def install() -> None:
    """Show list arguments as ``NAME...``. A typer without the methods this relies on is left as
    it is."""
    try:
        from typer.core import TyperArgument
    except ImportError:
        return
    own_name = getattr(TyperArgument, "_rich_display_name", None)
    own_type = getattr(TyperArgument, "display_type_rich", None)
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
