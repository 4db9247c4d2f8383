"""``toolloop serve``: a web page and a JSON API over a state folder's journal, for the people who
oversee runs and answer approval requests. Starlette under Hypercorn's trio worker (the ``serve``
extra). Reads and writes go through the same store functions as the command line.

- ``auth``: who is asking (a bearer token, or the page's cookie) and the CSRF check;
- ``journal``: what the API and the page read and change in the journal;
- ``sse``: a run's records as Server-Sent Events while they are committed;
- ``api`` and ``pages``: the JSON API and the HTML page;
- ``app`` puts them together; ``server`` runs it.
"""

from __future__ import annotations

INSTALL = "pip install 'toolloop-cli[serve]'"


def missing_extra() -> str | None:
    """The first module of the serve extra that cannot be imported, or None."""
    for name in ("starlette", "hypercorn", "jinja2"):
        try:
            __import__(name)
        except ImportError:
            return name
    return None
