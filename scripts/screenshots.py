#!/usr/bin/env python3
"""Take the screenshots of ``toolloop serve`` shown in the README and docs/serve.md.

From a clean example made for the purpose (a small shop App whose refunds above 100 wait for a
person), in a fresh folder: a refund run pauses, ``toolloop serve`` starts, and Debian's Chromium
(``/usr/bin/chromium``, driven by Playwright: no browser is ever downloaded) opens the inbox at a
phone's width, approves the refund with edited arguments, resumes the run and shows its page::

    python scripts/screenshots.py                 # rewrites docs/img/inbox.png and docs/img/run.png
    python scripts/screenshots.py --out DIR       # writes them to DIR instead

The browser test (tests/test_serve_browser.py) launches Chromium the same way (``launch``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--no-first-run"]
PHONE = {"width": 375, "height": 812}

REGISTRY = """\
version: 1
app_root: .
subagents:
  shop:
    runner_defaults: {tool_timeout_s: 30}
    tools:
      find_order:
        callable: shop.tools:find_order
        description: Look an order up.
        input_schema: {type: object, required: [order], properties: {order: {type: string}}}
        output_schema: {type: object}
      refund:
        callable: shop.tools:refund
        description: Refund a customer; a person approves refunds above 100.
        effect: write
        approval: {when: "args.amount > 100"}
        input_schema:
          type: object
          additionalProperties: false
          required: [amount, to]
          properties: {amount: {type: integer}, to: {type: string}}
        output_schema: {type: object}
"""

TOOLS = '''\
def find_order(order: str) -> dict:
    return {"order": order, "customer": "ACME Corp", "total": 250}


def refund(amount: int, to: str) -> dict:
    return {"refunded": amount, "to": to}
'''

PLAN = """\
version: 1
registry: ../registry.yml
subagent: shop
mode: sequential
calls:
  - {call_key: look, tool: find_order, args: {order: A-17}}
  - {call_key: refund, tool: refund, args: {amount: 250, to: ACME Corp}}
"""


def launch(playwright: Any) -> Any:
    """Debian's Chromium, headless (a missing browser is an error: apt-get install -y chromium)."""
    if not os.path.exists(CHROMIUM):
        raise SystemExit(f"{CHROMIUM} is missing: apt-get install -y chromium")
    return playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)


def make_example(folder: Path) -> None:
    (folder / "shop").mkdir(parents=True)
    (folder / "plans").mkdir()
    (folder / "registry.yml").write_text(REGISTRY, encoding="utf-8")
    (folder / "shop" / "__init__.py").write_text("", encoding="utf-8")
    (folder / "shop" / "tools.py").write_text(TOOLS, encoding="utf-8")
    (folder / "plans" / "refund.yml").write_text(PLAN, encoding="utf-8")


def toolloop(folder: Path, *args: str, **kw: Any) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("TOOLLOOP_SERVE_TOKEN", "TOOLLOOP_STATE_DIR")}
    return subprocess.Popen([sys.executable, "-m", "toolloop_cli", *args], cwd=folder, env={**env, "NO_COLOR": "1"},
                            stdin=subprocess.DEVNULL, **kw)


def serve(folder: Path) -> tuple[subprocess.Popen, str, str]:
    """``toolloop serve`` on a free port of 127.0.0.1: the process, its address and its new token."""
    proc = toolloop(folder, "serve", "--port", "0", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    for raw in proc.stderr:
        found = re.search(r"open (http://\S+)/\?token=(\S+)", raw.decode())
        if found:
            return proc, found.group(1), found.group(2)
    raise SystemExit("toolloop serve did not start")


def take(out: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "shop-app"
        make_example(folder)
        run = toolloop(folder, "run", "plans/refund.yml", "--format", "jsonl", stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
        stdout, stderr = run.communicate(timeout=120)
        if run.returncode != 4:
            raise SystemExit(f"the refund run did not pause for approval:\n{stderr.decode()}")
        rid = json.loads(stdout.decode().splitlines()[-1])["run_id"]
        server, url, token = serve(folder)
        try:
            with sync_playwright() as pw:
                browser = launch(pw)
                try:
                    page = browser.new_page(viewport=PHONE)
                    page.goto(f"{url}/inbox?token={token}")
                    card = page.locator("article.request").filter(has_text=rid)
                    expect(card).to_contain_text("refund")
                    page.screenshot(path=str(out / "inbox.png"), full_page=True)
                    card.get_by_label("Arguments").fill('{"amount": 200, "to": "ACME Corp"}')
                    card.get_by_role("button", name="Approve edited").click()
                    expect(card.get_by_role("status")).to_contain_text("Approved with edited arguments by")
                    card.get_by_role("button", name="Resume run").click()
                    page.wait_for_url(f"{url}/runs/{rid}")
                    receipt = page.locator('#records li.receipt[data-call="refund"]')
                    expect(receipt).to_have_attribute("data-status", "ok")
                    receipt.get_by_text("Arguments and result").click()
                    page.screenshot(path=str(out / "run.png"), full_page=True)
                finally:
                    browser.close()
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=textwrap.dedent(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img", help="folder for inbox.png and run.png")
    take(parser.parse_args().out)


if __name__ == "__main__":
    main()
