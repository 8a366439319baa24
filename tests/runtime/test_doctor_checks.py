"""`herald doctor`'s check of the public callback URL (runtime/doctor.py), without a stack:
the origin providers call back, https and reachable outside dev."""

from __future__ import annotations

import pytest

from runtime.doctor import CheckFailed, check_callback_url
from settings import Settings


@pytest.mark.parametrize(
    "url",
    ["https://herald.example.com", "https://example.com/herald/", "https://203.0.113.7:8443"],
)
def test_an_https_origin_outside_dev_is_fine(url: str) -> None:
    assert check_callback_url(url.rstrip("/"), env="production").startswith(url.rstrip("/"))


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("http://herald.example.com", "https outside dev"),
        ("https://localhost:8443", "localhost is loopback"),
        ("https://127.0.0.1", "127.0.0.1 is loopback"),
        ("https://[::1]:8443", "::1 is loopback"),
        ("https://0.0.0.0", "0.0.0.0 is loopback"),
        ("https://herald.example.com/v1/receipts/sms", "holds Herald's /v1"),
        ("https://herald.example.com/?token=x", "a query"),
        ("herald.example.com", "not an http(s) URL with a host"),
    ],
)
def test_a_url_providers_cannot_call_back_is_named(url: str, named: str) -> None:
    with pytest.raises(CheckFailed, match="HERALD_PUBLIC_BASE_URL") as raised:
        check_callback_url(url, env="production")
    assert named in str(raised.value)


def test_in_dev_the_local_api_address_is_fine() -> None:
    dev = Settings(env="dev", api_port=58080)
    assert check_callback_url(dev.callback_base_url, env="dev").startswith("http://127.0.0.1:58080")
