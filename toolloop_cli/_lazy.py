"""A package's public names, each imported from its module on first use, so that importing the
package (the command line starting, App code importing the production router) stays light."""

from __future__ import annotations

from typing import Any, Callable


def lazy_names(package: str, where: dict[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: ``where`` maps each name to the submodule that
    defines it; a name once imported is kept in ``namespace`` (the package's globals)."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module '{package}' has no attribute '{name}'")
        import importlib

        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    return __getattr__
