"""serve: the web page and HTTP API over the journal (the serve extra)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from .common import fail

STATE_DIR_HELP = "Folder of state.db (default .toolloop, or TOOLLOOP_STATE_DIR)."


def serve(
    host: str = typer.Option("127.0.0.1", "--host", metavar="HOST", help="Address to listen on (loopback unless you say otherwise)."),
    port: int = typer.Option(8765, "--port", min=0, max=65535, metavar="PORT", help="Port to listen on (0: any free one)."),
    users: Optional[Path] = typer.Option(None, "--users", metavar="FILE", help="YAML 'name: {token_env: VAR}': a token per person, recorded as the approver."),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", metavar="DIR", help=STATE_DIR_HELP),
) -> None:
    """A web page and JSON API for runs and approvals, over the same journal; every request needs a token."""
    import os

    from ..serve import INSTALL, missing_extra

    missing = missing_extra()
    if missing is not None:
        fail(f"toolloop serve needs the serve extra ({missing} is not installed)", 2, INSTALL)
    from .._login import login_name
    from ..serve.app import build_app
    from ..serve.auth import load_users, single_user
    from ..serve.journal import Journal
    from ..serve.server import every_address, is_loopback, listen, openable_url, serve as run_server
    from ..store import state_dir as pick

    token = None
    if users is not None:
        people = load_users(str(users), os.environ)
    else:
        people, token, generated = single_user(os.environ, login_name())
    sock = listen(host, port)
    is_loopback_sock = is_loopback(sock)
    anywhere = every_address(sock)
    journal = Journal(pick(str(state_dir) if state_dir else None), log=_log)
    url = openable_url(sock)
    sock_port = sock.getsockname()[1]
    loopback_host = url.split("//", 1)[1].rsplit(":", 1)[0]  # 127.0.0.1 or [::1]

    def ready() -> None:
        if anywhere:
            _log(f"serving {journal.store.path} on every address of this machine, port {sock_port}")
        else:
            _log(f"serving {journal.store.path} on {url}")
        who = f"approvals are recorded as {people.users[0].name!r}" if token is not None else ""
        if token is not None and generated:
            _log(f"open {url}/?token={token}  (a new token; {who})")
        elif token is not None:  # a token the person chose is never printed
            _log(f"open {url}/?token=TOKEN, with TOKEN the value of TOOLLOOP_SERVE_TOKEN ({who})")
        else:
            _log(f"{len(people.users)} user(s) from {users}: open {url}/?token=YOUR_TOKEN")
        if anywhere:
            _log(f"from another machine, open it with this machine's name or address in place of {loopback_host}")
        if not is_loopback_sock:
            _log(f"warning: {host} is reachable from other machines; anyone there with a token can answer approvals")

    try:
        run_server(build_app(journal, people), sock, on_ready=ready)
    finally:
        journal.close()
    _log("stopped")


def _log(line: str) -> None:
    try:
        sys.stderr.write(f"toolloop serve: {line}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
