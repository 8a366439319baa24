"""The console through an on-call shift, in Chromium: an open intent's page shows a change
that lands while it is open (its timeline too), says when it was last updated and can be
paused; every page fits a 390x844 phone and a 1280x800 laptop (scrollWidth <=
innerWidth); errors are pages; every page passes axe-core with no serious or critical
violation; /docs and /redoc start under their own policy."""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, update

from domain.principals import Principal, Role
from domain.requests import NotificationRequest
from domain.template_variables import schema_of
from domain.templates import TemplateVersion
from ledger import principals
from ledger.models import ConsoleSession, PolicyVersion, PrincipalRecord
from ledger.templates import seed_policy, seed_templates
from tests.console.conftest import (
    CHROMIUM,
    CLASS_VARIABLES,
    class_opening,
    fits,
    shot,
    sign_in,
)

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

WIDTHS = {"phone": (390, 844), "laptop": (1280, 800)}


async def scheduled(stack: Any, member: str, phone: str) -> Any:
    """An intent scheduled an hour ahead: open (its page refreshes itself) until cancelled."""
    return await stack.client.notify(
        NotificationRequest(
            business_key=f"class-opening:c-{secrets.token_hex(3)}:{member}",
            recipient_ref=member,
            template_key="class-opening",
            phone=phone,
            variables=CLASS_VARIABLES,
            send_at=datetime.now(UTC) + timedelta(hours=1),
        )
    )


def _versions(stack: Any) -> tuple[str, str, str]:
    """A template key with two versions in SMS and email, the second by another person
    and holding a script tag, and a policy version waiting for review: (key, the active
    policy, the new one)."""
    key = f"welcome-{secrets.token_hex(3)}"
    schema = schema_of(
        {
            "first_name": "text",
            "lines": {"type": "list", "fields": {"name": "text", "qty": "number"}},
        }
    )
    bodies = {
        1: "Hello {{ first_name }}, welcome to the studio.",
        2: "Hello {{ first_name }}, welcome to the studio. <script>alert(1)</script>\n"
        "{% for l in lines %}- {{ l.qty }} x {{ l.name }}\n{% endfor %}",
    }
    versions = [
        TemplateVersion(
            key,
            n,
            channel,
            "en",
            body,
            "Welcome, {{ first_name }}" if channel == "email" else None,
            schema=schema,
        )
        for n, body in bodies.items()
        for channel in ("sms", "email")
    ]
    version = f"console-{secrets.token_hex(3)}"
    with stack.client.sessions.begin() as session:
        active = session.execute(
            select(PolicyVersion).where(PolicyVersion.active.is_(True))
        ).scalar_one()
        was, document = active.version, active.document
    # The active document under a new version, asking review of the new key's versions.
    document = document.replace(f'version = "{was}"', f'version = "{version}"')
    document += f'\n[review]\ntemplates = ["{key}"]\n'
    with stack.client.sessions.begin() as session:
        seed_templates(session, versions[:2])
        seed_templates(session, versions[2:], author="rosa")
        seed_policy(session, document, name="console", activate=False, author="rosa")
    return key, was, version


def _moment(text: str) -> datetime:
    """The first time a console text shows (UTC, to the second)."""
    found = re.search(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}", text)
    assert found, text
    return datetime.strptime(found.group(), "%Y-%m-%d %H:%M:%S")


async def accessible(page: Any) -> None:
    from axe_playwright_python.async_playwright import Axe

    results = await Axe().run(page)
    bad = [
        (v["id"], v["impact"], [n["target"] for n in v["nodes"]][:3])
        for v in results.response["violations"]
        if v["impact"] in ("serious", "critical")
    ]
    assert not bad, (page.url, bad)


async def test_an_open_intents_page_shows_a_change_that_lands_while_it_is_open(stack, console):  # type: ignore[no-untyped-def]
    from playwright.async_api import async_playwright, expect

    member = f"m-{secrets.token_hex(3)}"
    intent = await scheduled(stack, member, f"+4474004{secrets.randbelow(100_000):05d}")
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM))
        try:
            page = await (await browser.new_context()).new_page()
            await sign_in(page, console.base, console.operator)
            await page.goto(f"{console.base}/console/intents/{intent.intent_id}")
            first = await page.locator("#updated").inner_text()
            assert "Last updated" in first
            timeline = page.locator("#timeline")
            await expect(timeline).not_to_contain_text("cancelled the intent")
            cancel_button = page.get_by_role("button", name="Cancel intent")
            await expect(cancel_button).to_have_count(1)
            # Someone else cancels it (the JSON API's path), while this page stays open.
            await stack.client.cancel(
                intent.intent_id, by=Principal("ops-bot", Role.OPERATOR), reason="class moved"
            )
            await expect(timeline).to_contain_text(
                "ops-bot (operator) cancelled the intent", timeout=15_000
            )
            await expect(page.locator("#outcome")).to_contain_text("Cancelled at")
            await expect(page.locator("#announce")).to_contain_text("Updated.")
            # What it offers comes with what it shows: no Cancel on a cancelled intent, and
            # the stamp is no older than the change the page shows.
            await expect(cancel_button).to_have_count(0)
            await expect(page.locator("#updated")).not_to_have_text(first)
            stamp = await page.locator("#updated").inner_text()
            shown = (await page.locator("#outcome").inner_text()).split("Cancelled at", 1)[1]
            assert _moment(stamp) >= _moment(shown), (stamp, shown)
            assert page.url.endswith(intent.intent_id)  # in place, not reloaded

            # A session that ends while the page refreshes itself leads to the sign-in page.
            watched = await scheduled(stack, member, f"+4474004{secrets.randbelow(100_000):05d}")
            alone = await (await browser.new_context()).new_page()
            name = f"tab-{secrets.token_hex(3)}"
            with stack.client.sessions.begin() as session:
                issued = principals.create(
                    session,
                    name,
                    Role.VIEWER,
                    by=Principal("test", Role.ADMIN),
                    at=datetime.now(UTC),
                )
            await sign_in(alone, console.base, (name, issued.token))
            await alone.goto(f"{console.base}/console/intents/{watched.intent_id}")
            with stack.client.sessions.begin() as session:
                session.execute(
                    update(ConsoleSession)
                    .where(ConsoleSession.principal == name)
                    .values(ended_at=datetime.now(UTC))
                )
            await alone.wait_for_url("**/console/sign-in", timeout=15_000)

            # A pause is remembered across pages and reloads.
            other = await scheduled(stack, member, f"+4474004{secrets.randbelow(100_000):05d}")
            await page.goto(f"{console.base}/console/intents/{other.intent_id}")
            await page.get_by_role("button", name="Pause updates").click()
            await page.reload()
            await expect(page.get_by_role("button", name="Resume updates")).to_be_visible()
            await page.get_by_role("button", name="Resume updates").click()
            await expect(page.get_by_role("button", name="Pause updates")).to_be_visible()
        finally:
            await browser.close()


async def test_every_page_fits_a_phone_and_a_laptop_and_passes_axe(stack, console):  # type: ignore[no-untyped-def]
    from playwright.async_api import async_playwright, expect

    member = f"m-{secrets.token_hex(3)}"
    phone = f"+4474005{secrets.randbelow(100_000):05d}"
    intent = await scheduled(stack, member, phone)
    key, active, version = _versions(stack)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM))
        try:
            for label, (width, height) in WIDTHS.items():
                suffix = "-phone" if label == "phone" else ""  # the screenshots' names
                context = await browser.new_context(viewport={"width": width, "height": height})
                page = await context.new_page()
                await page.goto(f"{console.base}/console/sign-in")
                await fits(page)
                await accessible(page)
                await sign_in(page, console.base, console.operator)
                for path in (
                    "/console",
                    "/console/intents",
                    f"/console/intents?key_prefix={intent.business_key}",
                    "/console/intents?awaiting=any",
                    f"/console/intents/{intent.intent_id}",
                    "/console/reconciliation",
                    "/console/templates",
                    f"/console/policies?old={active}&new={version}",
                    "/console/intents/no-such-intent",
                ):
                    await page.goto(f"{console.base}{path}")
                    await fits(page)
                    await accessible(page)
                    if "/templates" in path or "/policies" in path:
                        await shot(page, path[9:].split("?")[0] + suffix)
                # A version with its diff; a preview beside it is the answer to a POST form:
                # the message as text, nothing sent.
                await page.goto(f"{console.base}/console/templates/{key}/versions/2?against=1")
                await shot(page, "template-version" + suffix)
                await page.get_by_label("Channel and locale").select_option("sms/en")
                await page.get_by_label("Sample variables (JSON)").fill(
                    '{"first_name": "<b>Zoë</b>", "lines": [{"name": "mat", "qty": 2}]}'
                )
                await page.get_by_role("button", name="Preview").click()
                result = page.locator("#preview")
                await expect(result.locator("pre")).to_contain_text(
                    "Hello <b>Zoë</b>, welcome to the studio. <script>alert(1)</script>"
                )
                await expect(result).to_contain_text("UCS-2")
                await expect(page.locator("pre.diff .add").first).to_contain_text("<script>")
                await fits(page)
                await accessible(page)
                await shot(page, "template-preview" + suffix)
                if label == "phone":
                    await page.goto(f"{console.base}/console/intents")
                    await shot(page, "intents-phone")
                    await page.goto(f"{console.base}/console")
                    await shot(page, "overview-phone")
                    await page.goto(f"{console.base}/console/intents/{intent.intent_id}")
                    await shot(page, "intent-phone")
                # The answers to POST forms: the search and the recipient's page.
                await page.goto(f"{console.base}/console")
                await page.get_by_label("Find", exact=True).fill(phone)
                await page.get_by_role("button", name="Search").click()
                await page.get_by_role("heading", name="Search", exact=True).wait_for()
                await fits(page)
                await accessible(page)
                await page.get_by_role("button", name=f"Open recipient {member}").click()
                await page.get_by_role("heading", name=f"Recipient {member}").wait_for()
                await fits(page)
                await accessible(page)
                await context.close()
        finally:
            await browser.close()


async def test_errors_are_pages_and_the_api_docs_start_under_their_own_policy(stack, console):  # type: ignore[no-untyped-def]
    from playwright.async_api import async_playwright, expect

    member = f"m-{secrets.token_hex(3)}"
    intent = await scheduled(stack, member, f"+4474006{secrets.randbelow(100_000):05d}")
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM))
        try:
            page = await (await browser.new_context()).new_page()
            violations: list[str] = []

            def note(message: Any) -> None:
                # A script or style the policy blocked (ReDoc's logo from its CDN is blocked
                # too, by img-src, as it should be: nothing from a CDN).
                if "Content Security Policy" in message.text and "img-src" not in message.text:
                    violations.append(message.text)

            page.on("console", note)
            await sign_in(page, console.base, console.operator)
            await page.goto(f"{console.base}/console/intents/{intent.intent_id}")
            # A stale form: the session's CSRF token has changed under it.
            await page.locator("form[action$='/cancel'] input[name=csrf]").evaluate(
                "el => el.value = 'stale'"
            )
            await page.get_by_label("Reason for cancelling").fill("stale form")
            await page.get_by_role("button", name="Cancel intent").click()
            await expect(page.get_by_role("heading", name="This form has expired")).to_be_visible()
            await shot(page, "error")
            await page.goto(f"{console.base}/console/intents/nope")
            await expect(page.get_by_role("heading", name="Not found")).to_be_visible()

            # A role changed mid-session: the page still shows the button; the answer is a
            # page naming the role needed, and nothing changes.
            name = f"ops-{secrets.token_hex(3)}"
            with stack.client.sessions.begin() as session:
                issued = principals.create(
                    session,
                    name,
                    Role.OPERATOR,
                    by=Principal("test", Role.ADMIN),
                    at=datetime.now(UTC),
                )
            demoted = await (await browser.new_context()).new_page()
            await sign_in(demoted, console.base, (name, issued.token))
            await demoted.goto(f"{console.base}/console/intents/{intent.intent_id}")
            with stack.client.sessions.begin() as session:
                session.execute(
                    update(PrincipalRecord)
                    .where(PrincipalRecord.name == name)
                    .values(role="viewer")
                )
            await demoted.get_by_label("Reason for cancelling").fill("role changed")
            await demoted.get_by_role("button", name="Cancel intent").click()
            await expect(
                demoted.get_by_role("heading", name="Your role does not allow this")
            ).to_be_visible()
            await expect(demoted.locator("main")).to_contain_text("needs the operator role")
            await demoted.goto(f"{console.base}/console/intents/{intent.intent_id}")
            await expect(demoted.locator("#outcome")).not_to_contain_text("Cancelled")

            await page.goto(f"{console.base}/docs")
            await expect(page.locator(".swagger-ui .info .title")).to_contain_text("Herald")
            await page.goto(f"{console.base}/redoc")
            await expect(page.locator("h1").first).to_contain_text("Herald", timeout=15_000)
            assert not violations, violations
        finally:
            await browser.close()


async def test_times_switch_to_the_browsers_zone_and_back_and_the_choice_is_remembered(
    stack, console
):  # type: ignore[no-untyped-def]
    from playwright.async_api import async_playwright, expect

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM))
        try:
            context = await browser.new_context(timezone_id="Asia/Kolkata")  # UTC+05:30
            page = await context.new_page()
            await sign_in(page, console.base, console.viewer)
            await page.goto(
                f"{console.base}/console/intents?created_from=2026-12-07T10:00:00"
                "&created_to=2026-12-07T11:00:00"
            )
            field = page.get_by_label("Created from")
            await expect(field).to_have_value("2026-12-07 10:00:00")
            await page.get_by_role("button", name="Times: UTC (show local)").click()
            await expect(field).to_have_value("2026-12-07 15:30:00")
            await expect(page.locator("label[for=f-from]")).to_contain_text("local time")
            await page.reload()  # remembered
            await expect(page.get_by_label("Created from")).to_have_value("2026-12-07 15:30:00")
            # A time typed in local time is sent in UTC.
            await page.get_by_label("Created from").fill("2026-12-07 16:00:00")
            await page.get_by_role("button", name="Filter").click()
            await page.wait_for_url("**created_from=2026-12-07+10%3A30%3A00**")
            await page.goto(f"{console.base}/console")
            shown = await page.locator("#updated time").inner_text()
            assert shown.endswith(("GMT+5:30", "IST")), shown
            await page.get_by_role("button", name="Times: local (show UTC)").click()
            assert (await page.locator("#updated time").inner_text()).endswith(" UTC")
        finally:
            await browser.close()


async def test_a_caller_is_found_by_a_national_number_and_by_the_carriers_sid(stack, console):  # type: ignore[no-untyped-def]
    import asyncio

    from playwright.async_api import async_playwright, expect
    from sqlalchemy import select

    from ledger.models import Attempt

    member = f"m-{secrets.token_hex(3)}"
    phone = f"+4474007{secrets.randbelow(100_000):05d}"
    key = f"class-opening:c-{secrets.token_hex(3)}:{member}"
    sent = await class_opening(stack, member, phone, key)
    await asyncio.wait_for(stack.client.temporal.get_workflow_handle(sent.workflow_id).result(), 60)
    with stack.client.sessions() as session:
        sid = session.execute(
            select(Attempt.remote_id).where(Attempt.intent_id == sent.intent_id)
        ).scalar_one()
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM))
        try:
            page = await (await browser.new_context()).new_page()
            await sign_in(page, console.base, console.viewer)
            national = f"0{phone[3:7]} {phone[7:]}"  # 07400 7NNNNN, as a caller says it
            await page.get_by_label("Find", exact=True).fill(national)
            await page.get_by_label("Country of a number without +").select_option("GB")
            await page.get_by_role("button", name="Search").click()
            await expect(page.get_by_role("link", name=sent.business_key)).to_be_visible()
            assert phone not in await page.content() and national not in await page.content()
            await expect(page.locator("main")).to_contain_text(f"+44********{phone[-2:]}")
            await shot(page, "search")
            await page.get_by_label("Find", exact=True).fill(sid or "")
            await page.get_by_role("button", name="Search").click()
            await expect(page.get_by_role("link", name=sent.business_key)).to_be_visible()
        finally:
            await browser.close()


async def test_a_guessed_name_meets_a_page_that_says_to_wait(stack, console):  # type: ignore[no-untyped-def]
    from playwright.async_api import async_playwright, expect

    name = f"guess-{secrets.token_hex(3)}"
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM))
        try:
            page = await (
                await browser.new_context(viewport={"width": 390, "height": 844})
            ).new_page()
            statuses = []
            for _ in range(5):
                await page.goto(f"{console.base}/console/sign-in")
                await page.get_by_label("Name").fill(name)
                await page.get_by_label("Token").fill("not-it")
                async with page.expect_response("**/console/sign-in") as answer:
                    await page.get_by_role("button", name="Sign in").click()
                statuses.append((await answer.value).status)
            assert statuses == [401, 401, 401, 401, 429]
            await expect(page.get_by_role("alert")).to_contain_text("Try again in 1 minute")
            await fits(page)
            await accessible(page)
            await shot(page, "sign-in-throttled")
        finally:
            await browser.close()
