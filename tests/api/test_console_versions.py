"""The Templates and Policies pages over HTTP (ASGI, real Postgres): versions with their
author, review and variables; a source and a preview shown as text, never markup; a diff;
the approval form refused to the author in the rule's words; activation for admins only.

Each test records template keys and policy versions of its own; none activates a policy
(the ledger is shared with tests running at the same time)."""

from __future__ import annotations

import html
import re
import uuid

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

import policies
from domain.principals import Role
from domain.template_variables import schema_of
from domain.templates import TemplateVersion
from ledger.models import AuditEvent, PolicyVersion, TemplateVersionRow
from ledger.templates import seed_policy, seed_templates
from tests.api.test_console import principal, sign_in

pytestmark = pytest.mark.ledger

SCRIPT = "<script>alert(1)</script>"
SCHEMA = schema_of({"first_name": "text", "lines": {"type": "list", "of": "text"}})


def _template(committed: sessionmaker[Session], author: str) -> str:
    """A key of this test's own: v1 (packaged, active) and v2 by `author`, whose body
    holds a script tag, in SMS and email."""
    key = f"shown-{uuid.uuid4().hex[:8]}"

    def version(n: int, channel: str, body: str) -> TemplateVersion:
        subject = "Hi {{ first_name }}" if channel == "email" else None
        return TemplateVersion(key, n, channel, "en", body, subject, schema=SCHEMA)

    with committed.begin() as session:
        seed_templates(session, [version(1, c, "Hello {{ first_name }}") for c in ("sms", "email")])
        body = "Hello {{ first_name }} " + SCRIPT + "{% for l in lines %} {{ l }}{% endfor %}"
        seed_templates(session, [version(2, c, body) for c in ("sms", "email")], author=author)
    return key


def _audit(committed: sessionmaker[Session], subject: str, action: str) -> list[AuditEvent]:
    with committed() as session:
        return list(
            session.execute(
                select(AuditEvent)
                .where(AuditEvent.subject == subject, AuditEvent.action == action)
                .order_by(AuditEvent.id)
            ).scalars()
        )


def _notice(page: httpx.Response) -> str:
    found = re.search(r'<p class="notice[^"]*" role="status" id="notice">(.*?)</p>', page.text)
    assert found, page.text
    return html.unescape(found.group(1))


async def test_a_viewer_reads_every_version_and_its_source_as_text_with_a_diff_and_no_forms(
    http: httpx.AsyncClient, committed: sessionmaker[Session]
) -> None:
    author, _ = principal(committed, Role.ADMIN, "author")
    key = _template(committed, author)
    csrf = await sign_in(http, *principal(committed, Role.VIEWER))
    listed = (await http.get("/console/templates")).text
    section = listed.split(f">{key}</h2>")[1].split("</section>")[0]
    assert section.count(f'href="/console/templates/{key}/versions/2"') == 2  # SMS and email
    assert (
        author in section
        and "Herald (packaged)" in section
        and "<strong>active</strong>" in section
    )
    assert "<code>first_name</code> (text), <code>lines</code> (a list of text)" in section
    assert "on record before review (approved by Herald)" in section
    assert "not reviewed (the active policy does not require it)" in section

    page = await http.get(f"/console/templates/{key}/versions/2", params={"against": 1})
    assert page.status_code == 200
    assert SCRIPT not in page.text and html.escape(SCRIPT) in page.text  # shown, not run
    assert "sms / en: v1 → v2" in page.text and "email / en: v1 → v2" in page.text
    assert ">sms / en (v1 is active)</h2>" in page.text
    assert re.search(r'<span class="add">\+Hello \{\{ first_name \}\} &lt;script&gt;', page.text)
    assert '<span class="del">-Hello {{ first_name }}</span>' in page.text
    assert '<form method="post"' not in page.text.split('<main id="main">')[1]  # no forms
    refused = await http.post(
        f"/console/templates/{key}/versions/2/preview",
        data={"identity": "sms/en", "region": "default", "category": "transactional",
              "variables": '{"first_name": "x", "lines": []}', "csrf": csrf},
    )  # fmt: skip
    assert refused.status_code == 403 and "needs the operator role" in refused.text
    for action in ("approve", "activate"):
        tried = await http.post(
            f"/console/templates/{key}/versions/2/{action}", data={"csrf": csrf}
        )
        assert tried.status_code == 403
    missing = await http.get(f"/console/templates/{key}/versions/7")
    assert missing.status_code == 404 and f"template {key!r} has no version 7" in html.unescape(
        missing.text
    )


async def test_a_preview_shows_the_message_as_text_and_is_audited_without_the_variables(
    http: httpx.AsyncClient, committed: sessionmaker[Session]
) -> None:
    key = _template(committed, principal(committed, Role.ADMIN, "author")[0])
    csrf = await sign_in(http, *principal(committed, Role.OPERATOR, "reviewer"))
    path = f"/console/templates/{key}/versions/2"
    form = (await http.get(path)).text
    assert '"first_name": "first_name"' in html.unescape(form)  # the sample to start from
    sample = '{"first_name": "<b>Zoë</b>", "lines": ["a", "b"]}'
    shown = await http.post(
        f"{path}/preview",
        data={"identity": "email/en", "region": "default", "category": "promotional",
              "variables": sample, "csrf": csrf},
    )  # fmt: skip
    assert shown.status_code == 200, shown.text
    result = shown.text.split('id="preview"')[1]
    assert "<b>Zoë</b>" not in result and "Hi &lt;b&gt;Zoë&lt;/b&gt;" in result  # the subject
    assert "Hello &lt;b&gt;Zoë&lt;/b&gt; &lt;script&gt;alert(1)&lt;/script&gt; a b" in result
    assert "<dt>Encoding</dt><dd>UTF-8</dd>" in result
    assert "List-Unsubscribe header" in result and "/v1/unsubscribe/" in result
    digest = re.search(r"Content SHA-256</dt><dd><code>([0-9a-f]{64})</code>", result)
    assert digest
    audited = _audit(committed, f"{key}@v2", "template.preview")
    assert [(e.detail["channel"], e.detail["sha256"]) for e in audited] == [
        ("email", digest.group(1))
    ]
    assert "Zo" not in str(audited[0].detail)

    sms = await http.post(
        f"{path}/preview",
        data={"identity": "sms/en", "region": "default", "category": "transactional",
              "variables": '{"first_name": "Zoë", "lines": []}', "against": "1", "csrf": csrf},
    )  # fmt: skip
    assert "sms / en: v1 → v2" in sms.text  # the diff the page showed stays beside it
    assert re.search(r"<dt>Encoding</dt><dd>UCS-2</dd>\s*<dt>Segments</dt><dd>1</dd>", sms.text), (
        sms.text.split('id="preview"')[1]
    )

    wrong = await http.post(
        f"{path}/preview",
        data={"identity": "sms/en", "region": "default", "category": "transactional",
              "variables": '{"first_name": "Zoë", "lines": [{"x": 1}]}', "csrf": csrf},
    )  # fmt: skip
    assert wrong.status_code == 422
    assert "variable &#39;lines&#39; must be a list of text" in wrong.text
    assert "lines" in wrong.text.split('id="variables"')[1]  # the form keeps what was typed
    broken = await http.post(
        f"{path}/preview",
        data={"identity": "sms/en", "region": "default", "category": "transactional",
              "variables": '{"first_name": ', "csrf": csrf},
    )  # fmt: skip
    assert broken.status_code == 422 and "the sample variables are not JSON" in broken.text
    nowhere = await http.post(
        f"{path}/preview",
        data={"identity": "sms/fr", "region": "default", "category": "transactional",
              "variables": "{}", "csrf": csrf},
    )  # fmt: skip
    assert nowhere.status_code == 404
    assert len(_audit(committed, f"{key}@v2", "template.preview")) == 2  # the refused: none


async def test_the_author_is_refused_in_words_a_second_principal_approves_and_activates(
    http: httpx.AsyncClient, committed: sessionmaker[Session]
) -> None:
    author, token = principal(committed, Role.OPERATOR, "author")
    key = _template(committed, author)
    path = f"/console/templates/{key}/versions/2"
    csrf = await sign_in(http, author, token)
    assert "You recorded this version" in (await http.get(path)).text
    mine = await http.post(f"{path}/approve", data={"csrf": csrf}, follow_redirects=True)
    assert "its author cannot approve it, a second principal must" in _notice(mine)
    assert "Activate v2" in mine.text  # an operator activates, as by the API and the CLI

    second, token = principal(committed, Role.ADMIN, "second")
    csrf = await sign_in(http, second, token)
    approved = await http.post(f"{path}/approve", data={"csrf": csrf})
    assert approved.status_code == 303  # POST-redirect-GET
    page = await http.get(approved.headers["location"])
    assert "Done: approved" in _notice(page) and f"approved by {second}" in page.text
    activated = await http.post(f"{path}/activate", data={"csrf": csrf}, follow_redirects=True)
    assert "is active" in _notice(activated)
    with committed() as session:
        active = session.execute(
            select(TemplateVersionRow.version).where(
                TemplateVersionRow.key == key, TemplateVersionRow.active.is_(True)
            )
        ).scalars()
        assert sorted(active) == [2, 2]
    # A rollback is activating the earlier version.
    back = await http.post(
        f"/console/templates/{key}/versions/1/activate", data={"csrf": csrf}, follow_redirects=True
    )
    assert "v1 is active" in _notice(back)
    assert [e.action for e in _audit(committed, f"{key}@v1", "template.rollback")] == [
        "template.rollback"
    ]
    no_csrf = await http.post(f"{path}/activate", data={})
    assert no_csrf.status_code == 403


async def test_a_refused_version_never_becomes_active_and_the_page_says_why(
    http: httpx.AsyncClient, committed: sessionmaker[Session]
) -> None:
    key = _template(committed, principal(committed, Role.OPERATOR, "author")[0])
    path = f"/console/templates/{key}/versions/2"
    second, token = principal(committed, Role.ADMIN, "second")
    csrf = await sign_in(http, second, token)
    empty = await http.post(f"{path}/refuse", data={"csrf": csrf, "reason": " "})
    assert empty.status_code == 422
    refused = await http.post(
        f"{path}/refuse", data={"csrf": csrf, "reason": "tone"}, follow_redirects=True
    )
    assert "Done: refused" in _notice(refused) and f"refused by {second}" in refused.text
    tried = await http.post(f"{path}/activate", data={"csrf": csrf}, follow_redirects=True)
    assert f"(email/en) was refused by {second}; it never becomes active" in _notice(tried)
    assert _audit(committed, f"{key}@v2", "template.refuse")[0].detail["reason"] == "tone"


async def test_the_policies_page_diffs_two_versions_and_offers_review_but_not_to_the_author(
    http: httpx.AsyncClient, committed: sessionmaker[Session]
) -> None:
    author, token = principal(committed, Role.OPERATOR, "author")
    version = f"console-{uuid.uuid4().hex[:8]}"
    document = policies.load_packaged("default").replace(
        'version = "2026-12-07.1"', f'version = "{version}"'
    )
    with committed.begin() as session:
        seed_policy(session, document, name="console", activate=False, author=author)
        active = session.execute(
            select(PolicyVersion.version).where(PolicyVersion.active.is_(True))
        ).scalar_one()
    assert await sign_in(http, author, token)
    old = await http.get("/console/policy", follow_redirects=False)
    assert old.headers["location"] == "/console/policies"
    page = await http.get("/console/policies", params={"old": active, "new": version})
    assert f"Policy {active} (active)" in page.text
    assert "waiting for review by a principal other than its author" in page.text
    assert f'<span class="add">+version = &#34;{version}&#34;</span>' in page.text
    assert "You recorded this version" in page.text
    csrf = await sign_in(http, *principal(committed, Role.ADMIN, "admin"))
    early = await http.post(
        f"/console/policies/{version}/activate", data={"csrf": csrf}, follow_redirects=True
    )
    assert re.search(
        rf"policy '{version}' is not approved: \[review\] policies of policy \S+ requires a "
        rf"principal other than its author \({author}\) to approve it before it becomes active",
        _notice(early),
    ), _notice(early)
    second, token = principal(committed, Role.OPERATOR, "second")
    csrf = await sign_in(http, second, token)
    mine_elsewhere = (await http.get("/console/policies")).text
    assert f'action="/console/policies/{version}/approve"' in mine_elsewhere
    assert f"/console/policies/{version}/activate" in mine_elsewhere  # operators activate
    refused = await http.post(
        f"/console/policies/{version}/refuse",
        data={"csrf": csrf, "reason": "not yet"},
        follow_redirects=True,
    )
    assert f"refused policy {version}" in _notice(refused)
    csrf = await sign_in(http, *principal(committed, Role.ADMIN, "admin"))
    tried = await http.post(
        f"/console/policies/{version}/activate", data={"csrf": csrf}, follow_redirects=True
    )
    assert f"policy {version!r} was refused by {second}; it never becomes active" in _notice(tried)
    with committed() as session:
        assert session.get(PolicyVersion, version).active is False  # type: ignore[union-attr]
    await sign_in(http, *principal(committed, Role.VIEWER))
    viewed = (await http.get("/console/policies")).text
    assert 'method="post" action="/console/policies' not in viewed
