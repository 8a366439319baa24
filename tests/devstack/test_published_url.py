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


def test_settings_read_a_libpq_url_with_the_driver_herald_installs() -> None:
    # SQLAlchemy 2.0 maps a bare postgresql:// to psycopg2, which Herald does not install.
    from settings import Settings

    def resolved(url: str) -> str:
        return Settings(database_url=url).resolved_database_url()

    published = _redact("postgresql+psycopg://postgres@127.0.0.1:55432/herald")
    assert resolved(published) == "postgresql+psycopg://postgres@127.0.0.1:55432/herald"
    assert resolved("postgres://app@db/herald") == "postgresql+psycopg://app@db/herald"
    assert resolved("postgresql+psycopg://app@db/herald") == "postgresql+psycopg://app@db/herald"
    assert Settings(postgres_port=6543).resolved_database_url() == (
        "postgresql+psycopg://postgres@127.0.0.1:6543/herald"
    )
