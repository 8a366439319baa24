"""Two clients generated from the document the running API serves, each driven through
what an app does: create, replay (Idempotency-Key), read, list by pages, cancel, and two
refusals (a 422 naming its field, a 404). Python's by `openapi-python-client`, TypeScript's
by `openapi-typescript` + `openapi-fetch` (tests/clients/ts, pinned by its lock file; the
test says so and skips when `node` is absent). docs/apps.md shows the same calls.

Each client is generated once per session. It pages by the cursor a page hands out
(issue #50, item 3); the app cancels its own intent (item 1).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from domain.principals import Principal, Role
from ledger import principals

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

HERE = Path(__file__).parent
TS = HERE / "ts"
NODE, NPM = shutil.which("node"), shutil.which("npm")
PYTHON_CLIENT_CONFIG = "literal_enums: true\npackage_name_override: herald_client\n"
"""`literal_enums`: the zone enum has names that differ only in punctuation (`GMT+0`,
`GMT-0`, `GMT0`), which openapi-python-client's enum classes cannot tell apart."""


@dataclass(frozen=True)
class Api:
    base: str
    document: Path
    app_token: str
    operator_token: str


@pytest_asyncio.fixture(scope="module")
async def api(stack: Any, tmp_path_factory: pytest.TempPathFactory) -> Api:
    """The running stack's API, its served document, and an app and an operator of its own.
    (Everything here is async or in a thread: the stack's API answers on this loop.)"""
    base = stack.addresses.api
    document = tmp_path_factory.mktemp("contract") / "openapi.json"
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        document.write_bytes((await http.get("/openapi.json")).content)
    admin, now = Principal("test", Role.ADMIN), datetime.now(UTC)
    suffix = secrets.token_hex(3)
    with stack.client.sessions.begin() as session:
        app = principals.create(session, f"shop-{suffix}", Role.APP, by=admin, at=now)
        operator = principals.create(session, f"ops-{suffix}", Role.OPERATOR, by=admin, at=now)
    return Api(base, document, app.token, operator.token)


async def _run(command: list[str], cwd: Path) -> None:
    done = await asyncio.to_thread(
        subprocess.run, command, cwd=cwd, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, f"{' '.join(command[:2])}: {done.stderr[-3000:]}"


@pytest_asyncio.fixture(scope="module")
async def python_client(api: Api, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Any]:
    out = tmp_path_factory.mktemp("python-client")
    config = out / "config.yaml"
    config.write_text(PYTHON_CLIENT_CONFIG)
    generator = Path(sys.executable).with_name("openapi-python-client")
    target = out / "herald_client"
    await _run(
        [str(generator), "generate", "--path", str(api.document), "--output-path",
         str(target), "--meta", "none", "--config", str(config)],
        cwd=out,
    )  # fmt: skip
    sys.path.insert(0, str(out))
    try:
        yield importlib.import_module("herald_client")
    finally:
        sys.path.remove(str(out))


def _intent(models: Any, key: str, phone: str) -> Any:
    return models.IntentCreate.from_dict(
        {
            "business_key": key,
            "recipient_ref": "m-1842",
            "template_key": "order-created",
            "template_version": 1,
            "phone": phone,
            "variables": {"order_id": "o-77"},
            # Scheduled an hour ahead, so the cancel closes work still to come.
            "send_at": (datetime.now(UTC) + timedelta(hours=1)).isoformat(),
        }
    )


def _phone() -> str:
    return f"+4474002{secrets.randbelow(100_000):05d}"


async def test_a_generated_python_client_creates_replays_reads_pages_cancels_and_is_refused(
    api: Api, python_client: Any
) -> None:
    create_intent, get_intent, list_intents, cancel_intent = (
        importlib.import_module(f"herald_client.api.{module}")
        for module in ("intents.create_intent", "intents.get_intent", "intents.list_intents",
                       "intents.cancel_intent")
    )  # fmt: skip
    models = importlib.import_module("herald_client.models")
    authenticated = importlib.import_module("herald_client.client").AuthenticatedClient
    app = authenticated(base_url=api.base, token=api.app_token)
    prefix, phone = f"order-created:o-{secrets.token_hex(4)}", _phone()

    once = _intent(models, f"{prefix}-1", phone)
    first = await create_intent.asyncio_detailed(
        client=app, body=once, idempotency_key=f"{prefix}-first"
    )
    replay = await create_intent.asyncio_detailed(
        client=app, body=once, idempotency_key=f"{prefix}-first"
    )
    assert first.status_code == 201, first.content
    created = first.parsed
    assert first.headers["Location"] == f"/v1/intents/{created.intent_id}"
    assert replay.status_code == 201 and replay.headers["Idempotent-Replayed"] == "true"
    assert replay.parsed.intent_id == created.intent_id

    read = await get_intent.asyncio_detailed(created.intent_id, client=app)
    assert read.status_code == 200 and read.parsed.intent.business_key == f"{prefix}-1"

    second = await create_intent.asyncio_detailed(
        client=app, body=_intent(models, f"{prefix}-2", phone)
    )
    assert second.status_code == 201
    # A page at a time, newest first: the next page by the cursor the first handed out.
    page = await list_intents.asyncio_detailed(client=app, limit=1)
    assert [i.id for i in page.parsed.items] == [second.parsed.intent_id]
    cursor = page.parsed.to_dict()["next"]
    older = await list_intents.asyncio_detailed(client=app, limit=1, cursor=cursor)
    assert [i.id for i in older.parsed.items] == [created.intent_id]
    assert older.parsed.to_dict()["previous"] is not None

    cancelled = await cancel_intent.asyncio_detailed(
        created.intent_id,
        client=app,  # an app cancels the intents it created
        body=models.OperatorBody(reason="the order was withdrawn"),
    )
    assert cancelled.status_code == 200 and cancelled.parsed.accepted is True

    wrong = _intent(models, f"{prefix}-3", phone)
    wrong.template_version = 0
    invalid = await create_intent.asyncio_detailed(client=app, body=wrong)
    assert invalid.status_code == 422
    assert [issue.loc for issue in invalid.parsed.detail] == [["body", "template_version"]]
    missing = await get_intent.asyncio_detailed(f"{prefix}-never", client=app)
    assert missing.status_code == 404 and isinstance(missing.parsed, models.Problem)


@pytest_asyncio.fixture(scope="module")
async def typescript_driver(api: Api, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/clients/ts copied aside, its locked packages installed (`npm ci`, from the
    registry or npm's cache), the types generated from the served document and the
    driver compiled with `tsc --strict`."""
    if NODE is None or NPM is None:
        pytest.skip("node and npm are not installed: the TypeScript client is not tried")
    work = tmp_path_factory.mktemp("ts-client")
    for name in ("package.json", "package-lock.json", "tsconfig.json", "drive.ts"):
        shutil.copy(TS / name, work / name)
    await _run([NPM, "ci", "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error"], work)
    bin_ = work / "node_modules" / ".bin"
    # Defaults do not make a request's field required (openapi-typescript's default does).
    await _run(
        [str(bin_ / "openapi-typescript"), str(api.document),
         "--default-non-nullable", "false", "-o", "herald.ts"],
        work,
    )  # fmt: skip
    await _run([str(bin_ / "tsc"), "-p", "."], work)
    return work / "drive.js"


async def test_a_generated_typescript_client_creates_replays_reads_pages_cancels_and_is_refused(
    api: Api, typescript_driver: Path
) -> None:
    prefix = f"order-created:o-{secrets.token_hex(4)}"
    env = {
        **os.environ,
        "HERALD_API": api.base,
        "HERALD_APP_TOKEN": api.app_token,
        "HERALD_OPERATOR_TOKEN": api.operator_token,
        "HERALD_KEY_PREFIX": prefix,
        "HERALD_PHONE": _phone(),
    }
    done = await asyncio.to_thread(
        subprocess.run,
        [str(NODE), str(typescript_driver)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)
    status, intent_id, location = seen["created"]
    assert (status, location) == (201, f"/v1/intents/{intent_id}")
    assert seen["replay"] == [201, intent_id, "true"]
    assert seen["read"] == [200, f"{prefix}:1"]
    second = seen["second"][1]
    assert seen["page"] == [200, [second]] and seen["older"] == [200, [intent_id], True]
    assert seen["cancel"] == [200, True]
    assert seen["invalid"] == [422, ["body.template_version"]]
    assert seen["missing"][0] == 404
