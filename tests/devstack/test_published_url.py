"""The Postgres URL `herald dev` publishes in dev.json is the one other terminals use."""

from devstack.stack import _redact


def test_published_url_keeps_the_role_so_other_users_can_connect() -> None:
    # Without the role libpq takes the login user's name (root), which the cluster lacks.
    assert _redact("postgresql+psycopg://postgres@127.0.0.1:55432/herald") == (
        "postgresql://postgres@127.0.0.1:55432/herald"
    )


def test_published_url_drops_the_password_but_keeps_host_and_database() -> None:
    assert _redact("postgresql+psycopg://app:s3cret@db:5432/herald") == (
        "postgresql://app@db:5432/herald"
    )
