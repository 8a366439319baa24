"""Templates and policies over the API: what an app needs to call a template (its
variables' JSON Schema), the policy versions, an admin's import of its own files, a
version's preview and diff, and its review by a second principal and activation."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import select

import policies
from domain.principals import Role
from ledger import principals
from ledger.models import AuditEvent, Intent
from tests.api.conftest import BEARER
from tests.conftest import unique

pytestmark = pytest.mark.ledger

CATALOG = """
[[template]]
key = "{key}"
version = 1
channel = "sms"
locale = "en"
body = "Hi {{{{ first_name }}}}: {{{{ lines | length }}}} lines."

[template.variables]
first_name = "text"
lines = {{ type = "list", fields = {{ name = "text", qty = "number" }} }}
"""
TEXT = {"Content-Type": "text/plain"}


@pytest.fixture
def app_token(committed) -> dict[str, str]:  # type: ignore[no-untyped-def]
    with committed.begin() as session:
        issued = principals.create(
            session, unique("shop"), Role.APP, by=principals.BOOTSTRAP_ACTOR, at=datetime.now(UTC)
        )
    return {"Authorization": f"Bearer {issued.token}"}


async def test_an_app_lists_templates_and_reads_the_variables_a_version_takes(http, app_token):
    listed = await http.get("/v1/templates", headers=app_token)
    assert listed.status_code == 200, listed.text
    by_key = {t["key"]: t for t in listed.json()["items"]}
    assert by_key["order-created"]["channels"] == ["email", "sms"]
    assert {"channel": "sms", "locale": "en", "version": 2} in by_key["order-created"]["active"]

    shown = await http.get("/v1/templates/order-created", headers=app_token)
    assert shown.status_code == 200, shown.text
    (email_v2,) = [
        v for v in shown.json()["versions"] if (v["channel"], v["version"]) == ("email", 2)
    ]
    schema = email_v2["variables_schema"]
    assert schema["required"] == ["first_name", "order_id", "total", "items", "tracking_url"]
    assert schema["properties"]["items"]["description"] == "a list of text"
    assert email_v2["author"] is None and email_v2["recorded_at"]

    missing = await http.get("/v1/templates/no-such-template", headers=app_token)
    assert (
        missing.status_code == 404 and missing.json()["detail"] == "no template 'no-such-template'"
    )


async def test_an_admin_imports_a_catalog_once_and_a_broken_one_is_refused_with_its_line(
    http, app_token
):
    key = unique("welcome")
    text = CATALOG.format(key=key)
    done = await http.post("/v1/templates/import", content=text, headers={**BEARER, **TEXT})
    assert done.status_code == 200, done.text
    assert done.json() == {"recorded": [f"{key} v1 (sms/en)"], "unchanged": []}
    again = await http.post("/v1/templates/import", content=text, headers={**BEARER, **TEXT})
    assert again.json() == {"recorded": [], "unchanged": [f"{key} v1 (sms/en)"]}

    shown = (await http.get(f"/v1/templates/{key}", headers=app_token)).json()
    (version,) = shown["versions"]
    assert version["author"] == "break-glass" and version["active"] is False
    assert version["variables_schema"]["properties"]["lines"]["items"]["required"] == [
        "name",
        "qty",
    ]

    broken = text.replace("version = 1", "version = 2").replace("first_name }}", "name }}")
    refused = await http.post("/v1/templates/import", content=broken, headers={**BEARER, **TEXT})
    assert refused.status_code == 422, refused.text
    (problem,) = refused.json()["detail"]
    assert (
        problem["msg"].startswith("body:7: ") and "undeclared variable(s) 'name'" in problem["msg"]
    )
    assert len((await http.get(f"/v1/templates/{key}", headers=app_token)).json()["versions"]) == 1

    by_app = await http.post("/v1/templates/import", content=text, headers={**app_token, **TEXT})
    assert by_app.status_code == 403


async def test_policies_are_listed_shown_and_imported_with_their_author(http, app_token):
    version = unique("2099-01-01")
    text = policies.load_packaged("default").replace('"2026-12-07.1"', f'"{version}"')
    done = await http.post("/v1/policies/import", content=text, headers={**BEARER, **TEXT})
    assert done.status_code == 200 and done.json()["recorded"] == [version], done.text

    listed = {
        p["version"]: p for p in (await http.get("/v1/policies", headers=app_token)).json()["items"]
    }
    assert listed[version]["author"] == "break-glass" and listed[version]["active"] is False
    assert listed["2026-12-07.1"]["author"] is None
    shown = await http.get(f"/v1/policies/{version}", headers=app_token)
    assert shown.status_code == 200 and shown.json()["document"] == text

    edited = text + "\n# edited in place\n"
    refused = await http.post("/v1/policies/import", content=edited, headers={**BEARER, **TEXT})
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["msg"].startswith("body:14: policy version ")
    missing = await http.get("/v1/policies/1999.1", headers=app_token)
    assert missing.status_code == 404


async def test_intake_names_a_wrong_shaped_variable_and_the_shape_it_must_have(http):
    doc = {
        "business_key": unique("order-created:o"),
        "recipient_ref": "m-1842",
        "template_key": "order-created",
        "template_version": 2,
        "channels": ["email"],
        "email": "camille@example.org",
        "variables": {
            "order_id": "o-77",
            "first_name": "Camille",
            "total": "EUR 84.90",
            "tracking_url": "https://x.test/t",
            "items": [{"name": "Poster", "qty": 1}],
        },
    }
    answer = await http.post("/v1/intents", json=doc, headers=BEARER)
    assert answer.status_code == 422, answer.text
    issues = {issue["loc"][-1]: issue["msg"] for issue in answer.json()["detail"]}
    assert issues["variables"] == (
        "template 'order-created': variable 'items' must be a list of text; item 0 is an object"
    )
    assert "Poster" not in answer.text


TWO_VERSIONS = CATALOG + CATALOG.replace("version = 1", "version = 2").replace(
    "Hi {{{{", "Hello {{{{"
)


@pytest.fixture
def operator_token(committed) -> tuple[str, dict[str, str]]:  # type: ignore[no-untyped-def]
    name = unique("reviewer")
    with committed.begin() as session:
        issued = principals.create(
            session, name, Role.OPERATOR, by=principals.BOOTSTRAP_ACTOR, at=datetime.now(UTC)
        )
    return name, {"Authorization": f"Bearer {issued.token}"}


async def test_a_version_is_shown_diffed_and_previewed_by_an_app_and_nothing_is_sent(
    http, app_token, committed
):
    key = unique("welcome")
    done = await http.post(
        "/v1/templates/import", content=TWO_VERSIONS.format(key=key), headers={**BEARER, **TEXT}
    )
    assert done.status_code == 200, done.text
    base = f"/v1/templates/{key}/versions"

    shown = await http.get(f"{base}/2", headers=app_token)
    assert shown.status_code == 200, shown.text
    (v2,) = shown.json()["versions"]
    assert (v2["version"], v2["approved_by"], v2["refused_by"]) == (2, None, None)
    assert (await http.get(f"{base}/9", headers=app_token)).json()["detail"] == (
        f"template {key!r} has no version 9"
    )

    diff = (await http.get(f"{base}/2/diff?from=1", headers=app_token)).json()
    (only,) = diff["diffs"]
    assert (only["channel"], only["locale"]) == ("sms", "en")
    assert "-Hi {{ first_name }}" in only["diff"] and "+Hello {{ first_name }}" in only["diff"]

    sample = {"first_name": "Ada", "lines": [{"name": "Poster", "qty": 2}]}
    preview = await http.post(f"{base}/2/preview", json={"variables": sample}, headers=app_token)
    assert preview.status_code == 200, preview.text
    seen = preview.json()
    assert seen["text"].startswith("Hello Ada: 1 lines.")
    assert (seen["encoding"], seen["segments"], seen["subject"]) == ("GSM-7", 1, None)
    assert len(seen["sha256"]) == 64 and seen["links_added"] == []

    wrong = {"first_name": "Ada", "lines": ["Poster"]}
    refused = await http.post(f"{base}/2/preview", json={"variables": wrong}, headers=app_token)
    assert refused.status_code == 422, refused.text
    (problem,) = refused.json()["detail"]
    assert problem["loc"] == ["body", "variables"]
    assert problem["msg"] == (
        f"template {key!r}: variable 'lines' must be a list of objects with fields name, qty; "
        "item 0 is text"
    )
    assert "Poster" not in refused.text

    # An email of a subscription-like category: the link Herald adds, shown as a placeholder.
    order = {
        "order_id": "o-77", "first_name": "Camille", "total": "EUR 84.90",
        "items": ["Poster"], "tracking_url": "https://x.test/t",
    }  # fmt: skip
    packaged = "/v1/templates/order-created/versions/2/preview"
    which = await http.post(packaged, json={"variables": order}, headers=app_token)
    assert which.status_code == 422
    assert which.json()["detail"][0]["msg"] == (
        "the version has several channels or locales (email/en, sms/en): name one"
    )
    email = await http.post(
        packaged,
        json={"variables": order, "channel": "email", "category": "promotional"},
        headers=app_token,
    )
    assert email.status_code == 200, email.text
    assert email.json()["subject"] and email.json()["encoding"] == "UTF-8"
    (link,) = email.json()["links_added"]
    assert link["name"] == "unsubscribe" and link["value"].startswith("https://<herald api>/")

    with committed() as session:
        audits = (
            session.execute(
                select(AuditEvent)
                .where(AuditEvent.action == "template.preview", AuditEvent.subject == f"{key}@v2")
                .order_by(AuditEvent.id)
            )
            .scalars()
            .all()
        )
        assert [a.detail["sha256"] for a in audits] == [seen["sha256"]]  # the refused: none
        assert "Ada" not in str(audits[0].detail)
        assert (
            session.execute(select(Intent).where(Intent.template_key == key)).first() is None
        )  # nothing sent


async def test_a_second_principal_approves_the_author_is_refused_and_a_rollback_activates(
    http, app_token, operator_token
):
    reviewer, as_reviewer = operator_token
    key = unique("welcome")
    await http.post(
        "/v1/templates/import", content=TWO_VERSIONS.format(key=key), headers={**BEARER, **TEXT}
    )
    base = f"/v1/templates/{key}/versions"

    own = await http.post(f"{base}/2/approve", headers=BEARER)
    assert own.status_code == 409
    assert own.json()["detail"] == (
        f"template {key!r} v2 (sms/en) was recorded by break-glass: its author cannot approve "
        "it, a second principal must"
    )
    approved = await http.post(f"{base}/2/approve", headers=as_reviewer)
    assert approved.status_code == 200, approved.text
    assert approved.json()["versions"][0]["approved_by"] == reviewer
    again = await http.post(f"{base}/2/approve", headers=as_reviewer)
    assert again.status_code == 200  # the same verdict by the same principal: a no-op
    assert (await http.post(f"{base}/2/approve", headers=app_token)).status_code == 403

    for unfit in ("\u200b ", "ask ada@example.org"):  # says nothing; names someone
        bad = await http.post(f"{base}/1/refuse", json={"reason": unfit}, headers=as_reviewer)
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "reason"]
        assert "example.org" not in bad.text
    refused = await http.post(f"{base}/1/refuse", json={"reason": "typo"}, headers=as_reviewer)
    assert refused.json()["versions"][0]["refused_by"] == reviewer
    blocked = await http.post(f"{base}/1/activate", headers=as_reviewer)
    assert blocked.status_code == 409
    assert blocked.json()["detail"].endswith(f"was refused by {reviewer}; it never becomes active")

    live = await http.post(f"{base}/2/activate", headers=as_reviewer)
    assert live.status_code == 200, live.text
    assert live.json()["versions"][0]["active"] is True
    listed = (await http.get(f"/v1/templates/{key}", headers=app_token)).json()["versions"]
    assert [(v["version"], v["active"]) for v in listed] == [(1, False), (2, True)]


async def test_a_policy_version_is_diffed_and_an_unapproved_one_is_not_activated(
    http, app_token, operator_token
):
    reviewer, as_reviewer = operator_token
    version = unique("2099-02-01")
    text = policies.load_packaged("default").replace('"2026-12-07.1"', f'"{version}"')
    await http.post("/v1/policies/import", content=text, headers={**BEARER, **TEXT})

    diff = await http.get(f"/v1/policies/{version}/diff?from=2026-12-07.1", headers=app_token)
    assert diff.status_code == 200, diff.text
    assert f'+version = "{version}"' in diff.json()["diff"]
    missing = await http.get(f"/v1/policies/{version}/diff?from=1999.1", headers=app_token)
    assert missing.status_code == 404 and missing.json()["detail"] == "no policy version '1999.1'"

    # Policies are reviewed by default: no activation before a second principal approves.
    blocked = await http.post(f"/v1/policies/{version}/activate", headers=as_reviewer)
    assert blocked.status_code == 409
    assert "is not approved: [review] policies of policy" in blocked.json()["detail"]
    assert (await http.post(f"/v1/policies/{version}/approve", headers=BEARER)).status_code == 409
    refused = await http.post(
        f"/v1/policies/{version}/refuse", json={"reason": "too strict"}, headers=as_reviewer
    )
    assert refused.status_code == 200 and refused.json()["refused_by"] == reviewer
    late = await http.post(f"/v1/policies/{version}/approve", headers=as_reviewer)
    assert late.status_code == 409 and late.json()["detail"].endswith(f"refused by {reviewer}")
