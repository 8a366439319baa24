"""The browser tier's fixtures: `herald api` in its own process over the e2e stack, and
Playwright helpers. Set HERALD_CONSOLE_SCREENSHOTS=docs/console to write the screenshots
docs/console.md shows."""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from devstack import free_port
from devstack.processes import ChildProcess
from domain.principals import Principal, Role
from domain.requests import NotificationRequest
from ledger import evidence, principals

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
SHOTS = os.environ.get("HERALD_CONSOLE_SCREENSHOTS")
CLASS_VARIABLES = {
    "class_name": "Spin (c-9081)",
    "starts_at": "18:30",
    "hold_until": "18:15",
    "booking_url": "https://studio.example/c/9081",
}


async def class_opening(stack: Any, member: str, phone: str, business_key: str) -> Any:
    """The member's SMS consent, then a class-opening intent to `phone` (started)."""
    with stack.client.sessions.begin() as session:
        evidence.record_consent(
            session,
            recipient_ref=member,
            channel="sms",
            purpose="service",
            source="booking app",
            at=datetime.now(UTC),
        )
    return await stack.client.notify(
        NotificationRequest(
            business_key=business_key,
            recipient_ref=member,
            template_key="class-opening",
            phone=phone,
            variables=CLASS_VARIABLES,
        )
    )


async def never_resolved_class_opening(
    stack: Any, member: str, class_id: str, phone_prefix: str
) -> Any:
    """A class-opening SMS the carrier simulator takes and never reports on: the attempt
    stays with the carrier until the policy's polling horizon makes it unknown."""
    member = f"{member}.{secrets.token_hex(4)}"
    phone = f"{phone_prefix}{secrets.randbelow(100_000):05d}"
    async with httpx.AsyncClient(base_url=stack.addresses.simulator, timeout=10) as sim:
        scripted = await sim.post(
            "/_sim/script", json={"to": phone, "fault": "never_resolves", "count": 1}
        )
        assert scripted.status_code == 200, scripted.text
    return await class_opening(stack, member, phone, f"class-opening:{class_id}:{member}")


@dataclass
class Console:
    base: str
    operator: tuple[str, str]
    viewer: tuple[str, str]
    log: Path


@pytest_asyncio.fixture(scope="session")
async def console(stack, tmp_path_factory) -> AsyncIterator[Console]:  # type: ignore[no-untyped-def]
    if not CHROMIUM.exists():
        pytest.fail("/usr/bin/chromium is missing: `make test` installs the chromium package")
    admin = Principal("test", Role.ADMIN)
    now = datetime.now(UTC)
    operator_name, viewer_name = f"ana-{secrets.token_hex(3)}", f"vic-{secrets.token_hex(3)}"
    with stack.client.sessions.begin() as session:
        operator = principals.create(session, operator_name, Role.OPERATOR, by=admin, at=now)
        viewer = principals.create(session, viewer_name, Role.VIEWER, by=admin, at=now)
    port = free_port()
    log = tmp_path_factory.mktemp("console") / "api.log"
    api = ChildProcess(
        "api",
        [sys.executable, "-m", "cli", "api", "--port", str(port)],
        log_path=log,
        env={**os.environ, **stack.env(), "HERALD_API_PORT": str(port)},
        cwd=ROOT,
    )
    api.start()
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=5) as http:
            for _ in range(200):
                try:
                    if (await http.get("/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
            else:
                raise AssertionError(log.read_text()[-2000:])
        yield Console(
            base,
            (operator_name, operator.token),
            (viewer_name, viewer.token),
            log,
        )
    finally:
        await asyncio.to_thread(api.stop)


async def fits(page: Any) -> None:
    """Nothing on the page is wider than its window (scrollWidth <= innerWidth)."""
    # A page answered to a click may still be fetching its stylesheet: measured then, the
    # unstyled intents table is 487 px wide on a phone (a CI run met it on the search page).
    await page.wait_for_load_state("load")
    widths = await page.evaluate(
        "() => [document.documentElement.scrollWidth, window.innerWidth, location.pathname]"
    )
    assert widths[0] <= widths[1], f"{widths[2]} is {widths[0]} px wide in {widths[1]}"
    # Nor does a form's field stick out of the box that holds it (a filter input at 390 px
    # once did by its own padding and border: the page was no wider, the box was).
    out = await page.evaluate(
        """() => Array.from(document.querySelectorAll("form input, form select"))
            .filter((el) => el.type !== "hidden" && el.offsetParent !== null)
            .map((el) => [el.name || el.id, el.getBoundingClientRect().right,
                          el.parentElement.getBoundingClientRect().right])
            .filter(([, right, box]) => right > box + 0.5)"""
    )
    assert not out, f"{widths[2]}: fields past their box (name, right, box): {out}"


async def shot(page, name: str) -> None:  # type: ignore[no-untyped-def]
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        await page.wait_for_load_state("load")  # styled, not the bare HTML
        await page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)


async def sign_in(page, base: str, who: tuple[str, str]) -> None:  # type: ignore[no-untyped-def]
    await page.goto(f"{base}/console")
    assert page.url.endswith("/console/sign-in")  # nothing without a session
    await page.get_by_label("Name").fill(who[0])
    await page.get_by_label("Token").fill(who[1])
    await page.get_by_role("button", name="Sign in").click()
    await page.get_by_role("heading", name="Overview").wait_for()
