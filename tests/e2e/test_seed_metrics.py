"""After `herald demo` scenarios, the seed metrics have moved: on the worker's Herald
metrics endpoint (submits and fallbacks it recorded) and on the API's /metrics (the
receipts it recorded)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from scenarios import SCENARIOS, DemoContext

pytestmark = pytest.mark.e2e


def total(text: str, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels`."""
    found = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                found += sample.value
    return found


async def scrape_when_up(http: httpx.AsyncClient, url: str, timeout: float = 60) -> str:
    """The worker serves its metrics once it has connected; until then, connection refused."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            answer = await http.get(url)
            answer.raise_for_status()
            return answer.text
        except httpx.TransportError:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.2)


async def test_demo_scenarios_move_the_seed_metrics(stack):  # type: ignore[no-untyped-def]
    demo = DemoContext(
        stack.client,
        stack.addresses,
        stack.cfg.data_path,
        sink=stack.sink,
        retention_days=stack.cfg.pii_retention_days,
    )
    worker_url = f"http://{stack.addresses.worker_herald_metrics}/metrics"
    api_url = f"{stack.addresses.api}/metrics"
    async with httpx.AsyncClient(timeout=10) as http:
        worker_before = await scrape_when_up(http, worker_url)
        api_before = (await http.get(api_url)).text
        await SCENARIOS["sms"](demo)
        await SCENARIOS["itinerary-change"](demo)
        worker_after = (await http.get(worker_url)).text
        api_after = (await http.get(api_url)).text

    def worker_moved(name: str, **labels: str) -> float:
        return total(worker_after, name, **labels) - total(worker_before, name, **labels)

    def api_moved(name: str, **labels: str) -> float:
        return total(api_after, name, **labels) - total(api_before, name, **labels)

    itinerary = dict(template_key="itinerary-change")
    # Two travellers fell back to email (never delivered; invalid number); one opted out.
    assert worker_moved("herald_fallbacks_total", channel="email", **itinerary) == 2
    assert (
        worker_moved("herald_attempts_prepared_total", channel="sms", role="first", **itinerary)
        == 2
    )
    assert (
        worker_moved(
            "herald_attempts_prepared_total", channel="email", role="fallback", **itinerary
        )
        == 2
    )
    # Every accepted submit: the sms scenario's and the never-resolving one; both emails.
    assert worker_moved("herald_scheduled_to_submitted_seconds_count", channel="sms") >= 2
    assert (
        worker_moved("herald_scheduled_to_submitted_seconds_count", channel="email", **itinerary)
        == 2
    )
    # The sms scenario's delivery came as a signed receipt through the API.
    assert api_moved("herald_submitted_to_delivered_seconds_count", channel="sms") >= 1
    assert "herald_duplicates_suppressed_total" in worker_after
    assert "+44" not in worker_after and "+44" not in api_after.split("# HELP")[0]
