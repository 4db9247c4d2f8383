"""The page in a real browser: Debian's Chromium (/usr/bin/chromium), headless, at a phone's
width (375x812), driven by Playwright. A paused call is approved from the inbox after an invalid
edit is refused on the page, the run is resumed, and its receipt turns ok on the run's page.

The screenshots in docs/img are taken by scripts/screenshots.py, which launches Chromium the same
way; a test here runs it into a temporary folder."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from conftest import ROOT, write
from servekit import TOKEN, Served, registry, toolloop


def _screenshots_script():
    spec = importlib.util.spec_from_file_location("screenshots", ROOT / "scripts" / "screenshots.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


shots = _screenshots_script()


@pytest.fixture
def browser():
    # a missing browser fails the test: it is installed by .ci/run (apt-get install chromium)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = shots.launch(pw)
        try:
            yield chromium
        finally:
            chromium.close()


def test_a_paused_call_is_approved_from_a_phone_sized_page_and_the_run_finishes(tmp_path, browser):
    from playwright.sync_api import expect

    write(tmp_path / "reg.yml", registry())
    write(tmp_path / "refund.yml", json.dumps({"version": 1, "registry": "reg.yml", "subagent": "t", "mode": "sequential",
                                               "calls": [{"tool": "echo", "call_key": "look", "args": {"order": "A-17"}},
                                                         {"tool": "pay", "call_key": "refund",
                                                          "args": {"amount": 250, "to": "ACME Corp"}}]}))
    proc = toolloop(tmp_path, "run", "refund.yml", "--format", "jsonl")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 4, err.decode()
    rid = json.loads(out.decode().splitlines()[-1])["run_id"]
    server = Served(tmp_path)
    try:
        page = browser.new_page(viewport={"width": 375, "height": 812})
        page.goto(f"{server.url}/?token={TOKEN}")
        assert page.url == f"{server.url}/"  # the token left the address; the cookie holds the session
        expect(page.locator("#runs")).to_contain_text(rid)
        page.get_by_role("link", name="Inbox").click()
        card = page.locator("article.request").filter(has_text=rid)
        expect(card).to_contain_text("pay")
        expect(card).to_contain_text("write")
        args = card.get_by_label("Arguments")
        assert json.loads(args.input_value()) == {"amount": 250, "to": "ACME Corp"}  # the exact arguments
        assert page.evaluate("document.documentElement.scrollWidth") <= 375  # nothing wider than the phone

        # an edit that fails the input schema is refused, and the page says why
        args.fill('{"amount": "two hundred", "to": "ACME Corp"}')
        card.get_by_role("button", name="Approve edited").click()
        expect(card.get_by_role("alert")).to_contain_text('at /amount: "two hundred" is not of type "integer"')
        # a valid one, approved with the keyboard
        args.fill('{"amount": 200, "to": "ACME Corp"}')
        args.focus()
        page.keyboard.press("Tab")  # to the message
        page.keyboard.type("capped at 200")
        page.keyboard.press("Tab")  # to the approve button
        focused = page.evaluate("document.activeElement.textContent")
        assert focused == "Approve edited"
        page.keyboard.press("Enter")
        expect(card.get_by_role("status")).to_contain_text("Approved with edited arguments by")

        # resume, then watch the receipt turn ok on the run's page
        card.get_by_role("button", name="Resume run").click()
        page.wait_for_url(f"{server.url}/runs/{rid}")
        receipt = page.locator('#records li.receipt[data-call="refund"]')
        expect(receipt).to_have_attribute("data-status", "ok")
        expect(page.locator("#run .status-line")).to_contain_text("ok")
        assert page.evaluate("document.documentElement.scrollWidth") <= 375
    finally:
        server.stop()
    records = toolloop(tmp_path, "runs", "show", rid, "--format", "jsonl").communicate(timeout=120)[0]
    refund = [json.loads(line) for line in records.decode().splitlines() if '"refund"' in line][0]
    assert refund["status"] == "ok" and refund["args"] == {"amount": 200, "to": "ACME Corp"}
    assert refund["approval"]["decision"] == "edited"


def test_the_screenshot_script_makes_both_pictures_from_a_clean_example(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "screenshots.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    for name in ("inbox.png", "run.png"):
        data = (tmp_path / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        width = int.from_bytes(data[16:20], "big")
        assert width == 375, (name, width)  # a phone's width
