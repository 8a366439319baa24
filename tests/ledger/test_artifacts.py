"""The Postgres artifact store (HERALD_ARTIFACT_STORE=postgres): the bytes round-trip
through the ledger, the same bytes are one row, and bytes changed behind its back, or a
hash it does not hold, are refused rather than returned."""

from __future__ import annotations

import hashlib
import secrets
from pathlib import Path

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from ledger import artifacts
from ledger.artifacts import (
    ArtifactMismatch,
    ArtifactMissing,
    ArtifactRef,
    FolderArtifactStore,
    PostgresArtifactStore,
)
from ledger.models import Artifact, ArtifactContent

pytestmark = pytest.mark.ledger


def test_bytes_round_trip_through_the_ledger_once_by_content(
    committed: sessionmaker[Session],
) -> None:
    store = PostgresArtifactStore(committed)
    data = b"%PDF-1.7\n" + secrets.token_bytes(2048)
    digest = hashlib.sha256(data).hexdigest()
    assert not store.exists(digest)

    ref = store.put(data, media_type="application/pdf", filename="invoice.pdf")
    again = store.put(data, media_type="application/pdf", filename="invoice.pdf")

    assert (
        ref
        == again
        == ArtifactRef(
            digest, len(data), "application/pdf", "invoice.pdf", artifacts.POSTGRES_LOCATION
        )
    )
    assert store.exists(digest) and store.get(ref) == data
    with committed() as session:
        rows = session.execute(
            select(func.count())
            .select_from(ArtifactContent)
            .where(ArtifactContent.sha256 == digest)
        ).scalar_one()
    assert rows == 1


def test_changed_bytes_and_an_unknown_hash_are_refused(committed: sessionmaker[Session]) -> None:
    store = PostgresArtifactStore(committed)
    data = secrets.token_bytes(64)
    ref = store.put(data, media_type="text/plain", filename="a.txt")
    with committed.begin() as session:
        session.execute(
            update(ArtifactContent)
            .where(ArtifactContent.sha256 == ref.sha256)
            .values(content=b"X" + data[1:])
        )

    with pytest.raises(ArtifactMismatch, match="hashes to"):
        store.get(ref)
    with pytest.raises(ArtifactMismatch):
        store.put(data, media_type="text/plain", filename="a.txt")
    with pytest.raises(ArtifactMissing):
        store.get(ArtifactRef("0" * 64, 1, "text/plain", "x", "elsewhere"))
    with pytest.raises(ValueError):
        store.exists("../../etc/passwd")


def test_the_setting_picks_the_store_and_registration_keeps_the_first_name(
    committed: sessionmaker[Session], tmp_path: Path
) -> None:
    assert isinstance(
        artifacts.open_store("postgres", data_path=tmp_path, sessions=committed),
        PostgresArtifactStore,
    )
    folder = artifacts.open_store("folder", data_path=tmp_path, sessions=committed)
    assert isinstance(folder, FolderArtifactStore) and folder.root == tmp_path / "artifacts"
    ref = folder.put(secrets.token_bytes(16), media_type="image/png", filename="first.png")
    with committed.begin() as session:
        artifacts.register(session, ref)
        second = artifacts.register(session, ArtifactRef(**{**ref.__dict__, "filename": "b.png"}))
    assert second.filename == "first.png"
    with committed() as session:
        row = session.get(Artifact, ref.sha256)
        assert row is not None and artifacts.ref_of(row) == ref


@pytest.mark.parametrize("kind", ["folder", "postgres"])
def test_the_session_report_scenario_stores_and_tampers_in_the_stacks_store(
    committed: sessionmaker[Session], tmp_path: Path, kind: str
) -> None:
    """`herald demo` on a stack with either HERALD_ARTIFACT_STORE: the report goes where the
    worker reads, and the altered one is altered there (so the hash check has work)."""
    from types import SimpleNamespace

    from scenarios.session_report import _store_and_register, _tamper

    ctx = SimpleNamespace(
        client=SimpleNamespace(sessions=committed), data_path=tmp_path, artifact_store=kind
    )
    ref = _store_and_register(ctx, secrets.token_bytes(32), "session.csv")  # type: ignore[arg-type]
    store = artifacts.open_store(kind, data_path=tmp_path, sessions=committed)  # type: ignore[arg-type]
    assert store.exists(ref.sha256)
    with committed() as session:
        assert session.get(Artifact, ref.sha256) is not None

    _tamper(ctx, ref)  # type: ignore[arg-type]

    with pytest.raises(ArtifactMismatch):
        store.get(ref)
