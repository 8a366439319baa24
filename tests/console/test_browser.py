"""The console in a real browser: Debian's Chromium driven by Playwright, against
`herald api` started as a user starts it (its own process), over the e2e stack's ledger
and Temporal, with its real worker running the workflows.

Set HERALD_CONSOLE_SCREENSHOTS=docs/console to write the screenshots docs/console.md shows.
"""

from __future__ import annotations

import asyncio
import csv
import io
import secrets
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from domain.requests import NotificationRequest
from ledger import review_items
from scenarios.ambiguous_settled import POLICY_NAME as SHORT_HORIZON_NAME
from scenarios.ambiguous_settled import short_horizon_policy
from scenarios.base import policy_active
from tests.conftest import long_story
from tests.console.conftest import (
    CHROMIUM,
    CLASS_VARIABLES,
    class_opening,
    fits,
    never_resolved_class_opening,
    shot,
    sign_in,
)

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


async def test_an_operator_and_a_viewer_work_the_console_in_a_browser(stack, console, tmp_path):
    from playwright.async_api import async_playwright, expect

    suffix = secrets.token_hex(4)
    member = f"m-1842.{suffix}"
    phone = f"+4474003{secrets.randbelow(100_000):05d}"
    opening = await class_opening(stack, member, phone, f"class-opening:c-9081:{member}")
    later = await stack.client.notify(
        NotificationRequest(
            business_key=f"class-opening:c-9082:{member}",
            recipient_ref=member,
            template_key="class-opening",
            phone=phone,
            variables=CLASS_VARIABLES,
            send_at=datetime.now(UTC) + timedelta(hours=1),
        )
    )
    result = await asyncio.wait_for(
        stack.client.temporal.get_workflow_handle(opening.workflow_id).result(), 60
    )
    assert result["outcome"] == "delivered", result

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM))
        try:
            context = await browser.new_context(
                viewport={"width": 1280, "height": 900}, accept_downloads=True
            )
            page = await context.new_page()
            await sign_in(page, console.base, console.operator)

            # Find the class-opening intent by the member's phone number (a POST form).
            await page.get_by_label("Find", exact=True).fill(phone)
            await page.get_by_role("button", name="Search").click()
            await page.get_by_role("heading", name="Search", exact=True).wait_for()
            assert phone not in page.url and phone not in await page.content()
            await shot(page, "search")
            await page.get_by_role("link", name=opening.business_key).click()
            await page.get_by_role("heading", name=f"Intent {opening.business_key}").wait_for()

            # Cancel after delivery: the sentence says plainly that nothing is recalled.
            await page.get_by_label("Reason for cancelling").fill("seat filled")
            await page.get_by_role("button", name="Cancel intent").click()
            sentence = page.locator("#outcome")
            await expect(sentence).to_contain_text("Delivered by SMS at")
            await expect(sentence).to_contain_text(
                f"by {console.operator[0]}: no further attempts; the SMS was handed to the "
                "carrier at"
            )
            await expect(sentence).to_contain_text("and cannot be recalled.")

            # A finished intent offers no resend, and says why in words.
            await expect(page.get_by_role("button", name="Approve resend")).to_have_count(0)
            await expect(page.locator("#no-actions")).to_contain_text(
                "its workflow no longer waits for an operator"
            )
            await shot(page, "intent-cancelled")

            # Cancel another intent (scheduled for later: its workflow is waiting). A second
            # tab left open on it refreshes itself (console.js) and shows the cancel.
            watching = await context.new_page()
            await watching.goto(f"{console.base}/console/intents/{later.intent_id}")
            assert await watching.locator("body").get_attribute("data-refresh")
            await page.goto(f"{console.base}/console/intents/{later.intent_id}")
            await page.get_by_label("Reason for cancelling").fill("class cancelled")
            await page.get_by_role("button", name="Cancel intent").click()
            await expect(page.locator("#outcome")).to_contain_text(
                f"by {console.operator[0]}: no further attempts; nothing had been sent."
            )
            await expect(watching.locator("#outcome")).to_contain_text(
                "nothing had been sent.", timeout=15_000
            )
            assert watching.url.endswith(later.intent_id)  # refreshed in place, not reloaded

            # Resolve a review item; it leaves the open list. (Filed here, after the delivered
            # intent's screenshot, which would otherwise show an open item on it.)
            with stack.client.sessions.begin() as session:
                now = datetime.now(UTC)
                review_items.record_review_items(
                    session,
                    [
                        review_items.ReviewRow(
                            kind=review_items.UNKNOWN_OUTCOME,
                            subject=f"intent:{opening.intent_id}:browser",
                            since=now,
                            age=timedelta(0),
                            intent_id=opening.intent_id,
                            business_key=opening.business_key,
                        )
                    ],
                    now,
                )
            await page.get_by_role("link", name="Reconciliation").click()
            await shot(page, "reconciliation")
            item = page.locator("article.item", has_text=opening.business_key)
            await item.get_by_label("No action: why").fill("checked with the carrier")
            await item.get_by_role("button", name="Resolve").click()
            await expect(page.locator("article.item", has_text=opening.business_key)).to_have_count(
                0
            )

            # The CSV of a filter: ids, keys, states; no destination.
            await page.goto(f"{console.base}/console/intents?key_prefix=class-opening:c-908")
            await shot(page, "intents")
            async with page.expect_download() as download_info:
                await page.get_by_role("link", name="Download CSV of this filter").click()
            download = await download_info.value
            body = Path(await download.path()).read_text()
            rows = {r["business_key"]: r for r in csv.DictReader(io.StringIO(body))}
            assert rows[opening.business_key]["state"] == "delivered"
            assert rows[later.business_key]["state"] == "cancelled"
            assert phone not in body

            # The recipient's page, from the intent's search result (POST form).
            await page.get_by_label("Find", exact=True).fill(phone)
            await page.get_by_role("button", name="Search").click()
            await page.get_by_role("button", name=f"Open recipient {member}").click()
            await page.get_by_role("heading", name=f"Recipient {member}").wait_for()
            await shot(page, "recipient")
            await page.get_by_role("link", name="Policies").click()
            await page.get_by_role("heading", name="Policies", exact=True).wait_for()

            # A POST without the CSRF token is refused, with the session cookie sent.
            refused = await page.request.post(
                f"{console.base}/console/intents/{opening.intent_id}/cancel",
                form={"reason": "no token"},
            )
            assert refused.status == 403

            # A viewer sees no cancel button, and the server refuses the POST anyway.
            viewer_context = await browser.new_context()
            viewer = await viewer_context.new_page()
            await sign_in(viewer, console.base, console.viewer)
            await viewer.goto(f"{console.base}/console/intents/{opening.intent_id}")
            await expect(viewer.get_by_role("button", name="Cancel intent")).to_have_count(0)
            csrf = await viewer.locator("input[name=csrf]").first.get_attribute("value")
            forbidden = await viewer.request.post(
                f"{console.base}/console/intents/{opening.intent_id}/cancel",
                form={"reason": "viewer tries", "csrf": csrf or ""},
            )
            assert forbidden.status == 403 and "operator role" in await forbidden.text()
            await shot(viewer, "intent-viewer")
            await viewer.get_by_role("button", name="Sign out").click()
            await viewer.get_by_role("heading", name="Sign in to the Herald console").wait_for()
            await shot(viewer, "sign-in")
        finally:
            await browser.close()
    assert phone not in console.log.read_text()


@long_story
async def test_an_operator_settles_an_unknown_attempt_from_the_reconciliation_page(stack, console):
    from playwright.async_api import async_playwright, expect

    # Under the ambiguous-settled story's policy version (the demo's with a 10 s polling
    # horizon instead of 60: a minute of waiting proves nothing here) until the intent waits
    # for a settlement past it; then the demo policy is active again.
    with policy_active(stack.client, short_horizon_policy(), name=SHORT_HORIZON_NAME):
        ref = await never_resolved_class_opening(stack, "m-1843", "c-9084", "+4474004")
        deadline = asyncio.get_running_loop().time() + 120
        while True:
            doc = await asyncio.to_thread(stack.client.timeline, ref.intent_id)
            if doc["intent"]["awaiting"] == "settlement":
                break
            assert asyncio.get_running_loop().time() < deadline, doc["intent"]
            await asyncio.sleep(1)

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM))
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            await sign_in(page, console.base, console.operator)
            await expect(page.locator("#attention-h")).to_have_text("Needs attention")
            await expect(page.locator("#waiting-settlement")).to_contain_text(
                "waiting for a settlement of an unknown attempt"
            )
            # With a Needs attention panel and a day of rates: nothing past a laptop's width
            # (the rates' labels once kept their full length and pushed the values out).
            await fits(page)
            await shot(page, "overview")

            # The waiting count leads to the intents that wait, each with its window's close.
            await page.locator("#waiting-settlement").click()
            await page.get_by_role("heading", name="Intents", exact=True).wait_for()
            assert page.url.endswith("/console/intents?awaiting=settlement")
            row = page.locator("tr", has_text=ref.business_key)
            await expect(row.locator("td.waits")).to_contain_text("a settlement until")
            await shot(page, "intents-awaiting")

            # Its page says until when it waits, offers the settle form, and says that the
            # horizon verdict's review item is already open (no second one is offered).
            await row.get_by_role("link", name=ref.business_key).click()
            await page.get_by_role("heading", name=f"Intent {ref.business_key}").wait_for()
            await expect(page.locator("#awaiting")).to_contain_text(
                "a settlement of the unknown attempt until"
            )
            await expect(page.locator("#settle-sms")).to_be_visible()
            await expect(page.locator("#review-open-sms")).to_contain_text(
                "(unknown_outcome) is open"
            )
            await shot(page, "intent")

            await page.get_by_role("link", name="Reconciliation", exact=True).click()
            item = page.locator("article.item", has_text=ref.business_key)
            await item.get_by_label("Settle under").select_option("carrier-ticket-not-delivered")
            await item.get_by_label("Reference").fill("CARRIER-4711")
            await item.get_by_label("Reason").fill("carrier ticket: message lost in transit")
            await shot(page, "reconciliation-settle")
            await item.get_by_role("button", name="Settle", exact=True).click()
            # Answered where it was sent, as an accepted notice, not a refused one.
            notice = page.locator("#row-notice")
            await expect(notice).to_contain_text(f"Settled: intent {ref.intent_id}: ")
            await expect(notice).to_have_class("notice accepted")
            await expect(page.locator("article.item", has_text=ref.business_key)).to_have_count(0)
        finally:
            await browser.close()
    doc = await asyncio.to_thread(stack.client.timeline, ref.intent_id)
    [attempt] = doc["attempts"]
    assert (attempt["state"], attempt["settled_rule"]) == (
        "undelivered",
        "carrier-ticket-not-delivered",
    )
    settle = [a for a in doc["operator_actions"] if a["action"] == "settle"]
    assert [(a["outcome"], a["operator"]) for a in settle] == [("accepted", console.operator[0])]
    [item_doc] = [r for r in doc["review_items"] if r["kind"] == "unknown_outcome"]
    assert item_doc["resolved_at"] is not None


async def test_an_operator_opens_a_review_item_from_an_intent_page(stack, console):
    """A member says nothing came while the SMS is still with the carrier: the operator
    opens a review item from the intent's page at once, and the Reconciliation page shows
    it in its set, naming who opened it and why."""
    from playwright.async_api import async_playwright, expect

    ref = await never_resolved_class_opening(stack, "m-1845", "c-9085", "+4474005")
    deadline = asyncio.get_running_loop().time() + 30
    while True:  # with the carrier, no final word (it never resolves)
        doc = await asyncio.to_thread(stack.client.timeline, ref.intent_id)
        if [a["state"] for a in doc["attempts"]] in (["submitted"], ["sent"]):
            break
        assert asyncio.get_running_loop().time() < deadline, doc["attempts"]
        await asyncio.sleep(0.5)

    why = "the member says nothing came"
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM))
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            await sign_in(page, console.base, console.operator)
            await page.goto(f"{console.base}/console/intents/{ref.intent_id}")
            await page.get_by_role("heading", name=f"Intent {ref.business_key}").wait_for()
            await page.locator("#review-reason-sms").fill(why)
            await page.locator("#review-sms").get_by_role("button").click()
            await expect(page.get_by_text("Opened review item #")).to_be_visible()
            # Open now: the page offers no second one.
            await expect(page.locator("#review-open-sms")).to_contain_text("is open")
            await expect(page.locator("#review-sms")).to_have_count(0)

            await page.get_by_role("link", name="Reconciliation", exact=True).click()
            item = page.locator("article.item", has_text=ref.business_key)
            await expect(item).to_contain_text(f"opened by {console.operator[0]}")
            await expect(item).to_contain_text(why)
            await item.scroll_into_view_if_needed()
            await shot(page, "reconciliation-opened")
            # Nothing to do after all: resolved with a note, it leaves the open list.
            await item.get_by_label("No action: why").fill("delivered late, member confirmed")
            await item.get_by_role("button", name="Resolve").click()
            await expect(page.locator("article.item", has_text=ref.business_key)).to_have_count(0)
        finally:
            await browser.close()
    doc = await asyncio.to_thread(stack.client.timeline, ref.intent_id)
    opened = [a for a in doc["operator_actions"] if a["action"] == "open-review"]
    assert [(a["outcome"], a["operator"]) for a in opened] == [("accepted", console.operator[0])]
