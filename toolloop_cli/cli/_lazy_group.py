"""A command group's commands, each built the first time it is looked up.

typer makes a click command from a function by reading its signature and type hints and
building its parameters; run as an app, it does so for every command of the app on every start,
although one command runs. The root group the program runs holds, in place of its commands, a
way to build each: running a command or asking for its help builds that one (and imports its
module); listing them (the root's help, shell completion, a misspelt command's suggestions by
name) needs only the names, except where the list shows each command's help, which builds them
all, as typer would. Each command is typer's own, built from the same registration as the whole
app's, so it parses and helps exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import Any


class LazyCommands(MutableMapping[str, Any]):
    """A group's ``commands`` (name -> click command) whose commands are built on first look-up,
    in the order ``make`` names them (the order help lists them)."""

    __slots__ = ("_make", "_made")

    def __init__(self, make: dict[str, Callable[[], Any]]) -> None:
        self._make = dict(make)
        self._made: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        made = self._made.get(name)
        if made is None:
            make = self._make[name]  # KeyError: no such command
            made = self._made[name] = make()
        return made

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        # not Mapping.get: a KeyError raised while building a command must not read as "no such command"
        return self[name] if name in self._make else default

    def __contains__(self, name: object) -> bool:
        return name in self._make

    def __setitem__(self, name: str, command: Any) -> None:
        self._make.setdefault(name, lambda: command)
        self._made[name] = command

    def __delitem__(self, name: str) -> None:
        del self._make[name]
        self._made.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._make)

    def __len__(self) -> int:
        return len(self._make)

    def built(self) -> list[str]:
        """The names of the commands built so far."""
        return [name for name in self._make if name in self._made]
