"""`/docs` and `/redoc` work with no network: every script, style sheet and icon they load
is served by the app itself, never by a CDN."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.ledger

_REFERENCE = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']|url:\s*["']([^"']+)["']""")


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
async def test_the_docs_page_references_no_other_host_and_its_assets_are_served(http, page):
    answer = await http.get(page)
    assert answer.status_code == 200
    html = answer.text
    # No absolute URL of any host, nor a protocol-relative one, anywhere in the page.
    assert "http://" not in html and "https://" not in html
    assert not re.search(r"""["']//""", html)
    references = [a or b for a, b in _REFERENCE.findall(html)]
    assets = [ref for ref in references if ref.endswith((".js", ".css", ".png"))]
    assert assets, html
    for ref in references:
        assert ref.startswith("/"), ref
        served = await http.get(ref)
        assert served.status_code == 200, ref
        assert served.content, ref
    if page == "/docs":
        assert any(ref.endswith("swagger-ui-bundle.js") for ref in assets)
        assert any(ref.endswith("swagger-ui.css") for ref in assets)
    else:
        assert any(ref.endswith("redoc.standalone.js") for ref in assets)
