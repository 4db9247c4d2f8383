"""Who answers an approval here when no name is given (light: the standard library only, so
``toolloop approve`` stays fast)."""

from __future__ import annotations


def login_name() -> str:
    """The login name, or ``unknown``."""
    import getpass

    try:
        return getpass.getuser()
    except (OSError, KeyError, ImportError):
        return "unknown"
