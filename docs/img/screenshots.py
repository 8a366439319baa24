"""Take the Web UI screenshots of docs/operations.md from a running `herald dev`.

    HERALD_POLICY_NAME=demo herald dev          # first terminal (moved ports are fine)
    herald demo                                  # second terminal: every story
    python docs/img/screenshots.py http://127.0.0.1:58233 \\
        notification:class-opening:c-9081:m-1842.<suffix> \\
        notification:scheduled-alert:<seller>:payout-b-<suffix>

The first id is the class-opening story's intent, the second the scheduled alert its
operator cancels after the SMS went (left `unknown`). Needs the Playwright package (`pip install
playwright`) and Debian's Chromium (`apt-get install -y chromium`); `playwright install`
would download a browser. The list gets the columns an engineer adds with "Configure
columns" (the UI keeps them in the browser's local storage, which is where this sets them).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from urllib.parse import quote

from playwright.sync_api import Page, sync_playwright

HERE = Path(__file__).parent
COLUMNS = [
    {"label": "Status"},
    {"label": "Workflow ID"},
    {"label": "HeraldOutcome"},
    {"label": "HeraldChannelsUsed"},
    {"label": "HeraldEventType"},
    {"label": "End"},
]
SETTLE_MS = 2500
"""The UI renders after its API calls; nothing on the page says when all have answered."""


def open_tab(page: Page, ui: str, workflow_id: str, tab: str) -> None:
    page.goto(f"{ui}/namespaces/default/workflows/{quote(workflow_id, safe='')}")
    page.wait_for_url("**/timeline*", timeout=30_000)  # the latest run's page
    page.goto(page.url.split("?")[0].rsplit("/", 1)[0] + f"/{tab}")
    page.wait_for_timeout(SETTLE_MS)


def main(ui: str, class_opening: str, scheduled_alert: str) -> None:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True)
        page = browser.new_page(viewport={"width": 1500, "height": 760})
        page.goto(f"{ui}/namespaces/default/workflows")
        page.evaluate(
            "columns => localStorage.setItem('namespace-workflow-table-columns', columns)",
            json.dumps({"default": COLUMNS}),
        )
        page.goto(f"{ui}/namespaces/default/workflows")
        page.wait_for_selector("text=HeraldOutcome", timeout=30_000)
        page.wait_for_timeout(SETTLE_MS)
        page.screenshot(path=HERE / "web-ui-workflow-list.png")

        page.set_viewport_size({"width": 1500, "height": 900})
        open_tab(page, ui, class_opening, "user-metadata")
        page.screenshot(path=HERE / "web-ui-class-opening-metadata.png")
        for name, workflow_id, height in (
            ("class-opening", class_opening, 1080),
            ("scheduled-alert", scheduled_alert, 1500),
        ):
            page.set_viewport_size({"width": 1500, "height": height})
            open_tab(page, ui, workflow_id, "history")
            page.get_by_text("Compact", exact=True).first.click()
            page.wait_for_timeout(SETTLE_MS)
            page.screenshot(path=HERE / f"web-ui-{name}-history.png")
        browser.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])
