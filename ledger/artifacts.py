"""Attachments: immutable bytes named by their SHA-256, behind one interface, two stores.

An artifact is stored once (`ArtifactStore.put`, idempotent by content) and registered in
the ledger's `artifact` table (`register`), which intake checks an intent's
`artifact_sha256` against. Reading (`get`) verifies the bytes against the reference (size
and SHA-256): bytes changed after they were stored raise :class:`ArtifactMismatch` and are
never returned, so a different file is never sent.

Two stores, picked by HERALD_ARTIFACT_STORE (:func:`open_store`):

- `folder` (the dev default): files at ``root/<sha256[:2]>/<sha256>``, written through a
  temporary file and an atomic rename, then made read-only (0o444). Only the processes
  that share the folder reach it (one host's volume).
- `postgres`: the `artifact_content` table of the ledger (bytea), which every worker and
  every API process already reaches, backed up with the ledger.

Calls are synchronous I/O; from async code run them in a thread (``asyncio.to_thread``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session, sessionmaker

from ledger.models import Artifact, ArtifactContent

StoreKind = Literal["folder", "postgres"]
"""HERALD_ARTIFACT_STORE's values."""

MEDIA_TYPES = (
    "application/pdf",
    "text/csv",
    "text/plain",
    "application/json",
    "image/png",
    "image/jpeg",
)
"""The media types an upload may have: documents and images a recipient's mail client
shows safely. Anything else (HTML, scripts, archives, executables) is refused (415)."""

DEFAULT_MAX_BYTES = 10 * 1024 * 1024
"""HERALD_ATTACHMENT_MAX_BYTES' default: 10 MiB, well inside what SMTP relays and SendGrid
take once base64 has grown it by a third."""

_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class ArtifactRef:
    """What a ledger row or workflow input keeps to name an artifact (no bytes)."""

    sha256: str
    """Hex SHA-256 of the content: the artifact's identity."""
    size: int
    """Length in bytes."""
    media_type: str
    """e.g. ``application/pdf``."""
    filename: str
    """The name shown to the recipient."""
    location: str
    """Where the store put it (informational: reads always go by ``sha256``)."""


class ArtifactError(Exception):
    """Base class for store failures."""


class ArtifactMismatch(ArtifactError):
    """The stored bytes are not the bytes the reference names (tampered or corrupted)."""

    def __init__(self, reason: str, *, sha256: str) -> None:
        """``reason`` in words; ``sha256`` the artifact's."""
        super().__init__(reason)
        self.reason = reason
        self.sha256 = sha256


class ArtifactMissing(ArtifactError):
    """No artifact with that hash is in the store."""


class ArtifactStore(Protocol):
    """Where attachment bytes live; every implementation is content-addressed."""

    def put(self, data: bytes, *, media_type: str, filename: str) -> ArtifactRef:
        """Store ``data`` (idempotent: the same bytes give the same reference)."""
        ...

    def get(self, ref: ArtifactRef) -> bytes:
        """The bytes, only if they still match ``ref`` (size and SHA-256)."""
        ...

    def exists(self, sha256: str) -> bool:
        """Whether bytes with this hash are stored (not whether they are intact)."""
        ...


def check_sha256(sha256: str) -> str:
    """``sha256`` if it is lowercase hex; ValueError otherwise."""
    if not _SHA256_HEX.match(sha256):
        # Guards the folder store's path too: a reference never points outside it.
        raise ValueError(f"not a lowercase hex SHA-256: {sha256!r}")
    return sha256


def verified(ref: ArtifactRef, data: bytes, where: str) -> bytes:
    """``data`` if it is what ``ref`` names; ArtifactMismatch otherwise."""
    if len(data) != ref.size:
        raise ArtifactMismatch(
            f"artifact {ref.sha256[:12]}... ({ref.filename}) is {len(data)} bytes {where}, "
            f"the reference says {ref.size}: refusing to use it",
            sha256=ref.sha256,
        )
    actual = hashlib.sha256(data).hexdigest()
    if actual != ref.sha256:
        raise ArtifactMismatch(
            f"artifact {ref.sha256[:12]}... ({ref.filename}) now hashes to {actual[:12]}...: "
            "it was changed after it was stored; refusing to use it",
            sha256=ref.sha256,
        )
    return data


class FolderArtifactStore:
    """Immutable content-addressed files under ``root`` (one host's folder)."""

    def __init__(self, root: Path | str) -> None:
        """Files under ``root`` (made when the first one is stored)."""
        self.root = Path(root)

    def path_for(self, sha256: str) -> Path:
        """Where the bytes with this hash live."""
        return self.root / check_sha256(sha256)[:2] / sha256

    def exists(self, sha256: str) -> bool:
        """Whether a file with this hash is in the folder."""
        return self.path_for(sha256).exists()

    def put(self, data: bytes, *, media_type: str, filename: str) -> ArtifactRef:
        """Write the file once; the same bytes again are checked, not written."""
        digest = hashlib.sha256(data).hexdigest()
        target = self.path_for(digest)
        ref = ArtifactRef(digest, len(data), media_type, filename, str(target))
        if target.exists():
            # Already there: it must still be the same bytes, or the store was tampered with.
            self.get(ref)
            return ref
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{digest[:8]}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, 0o444)
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        _fsync_dir(target.parent)
        return ref

    def get(self, ref: ArtifactRef) -> bytes:
        """The file's bytes, verified against ``ref``."""
        path = self.path_for(ref.sha256)
        try:
            data = path.read_bytes()
        except FileNotFoundError as exc:
            raise ArtifactMissing(f"artifact {ref.sha256[:12]}... is not in the store") from exc
        return verified(ref, data, "on disk")


POSTGRES_LOCATION = "postgres:artifact_content"


class PostgresArtifactStore:
    """The bytes in the ledger's `artifact_content` table: every process reaches them."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        """The ledger's sessions (each call is its own transaction)."""
        self._sessions = sessions

    def exists(self, sha256: str) -> bool:
        """Whether the table holds bytes with this hash."""
        with self._sessions() as session:
            found = session.execute(
                select(ArtifactContent.sha256).where(ArtifactContent.sha256 == check_sha256(sha256))
            ).scalar_one_or_none()
        return found is not None

    def put(self, data: bytes, *, media_type: str, filename: str) -> ArtifactRef:
        """Insert the bytes once; the same bytes again are checked, not written."""
        digest = hashlib.sha256(data).hexdigest()
        ref = ArtifactRef(digest, len(data), media_type, filename, POSTGRES_LOCATION)
        with self._sessions.begin() as session:
            # Two uploads of the same bytes at once: one row, no error for either.
            written = session.execute(
                insert(ArtifactContent)
                .values(sha256=digest, size=len(data), content=data)
                .on_conflict_do_nothing(index_elements=["sha256"])
                .returning(ArtifactContent.sha256)
            ).scalar_one_or_none()
        if written is None:
            # Already there: it must still be the same bytes, as in the folder store.
            self.get(ref)
        return ref

    def get(self, ref: ArtifactRef) -> bytes:
        """The row's bytes, verified against ``ref``."""
        with self._sessions() as session:
            data = session.execute(
                select(ArtifactContent.content).where(
                    ArtifactContent.sha256 == check_sha256(ref.sha256)
                )
            ).scalar_one_or_none()
        if data is None:
            raise ArtifactMissing(f"artifact {ref.sha256[:12]}... is not in the store")
        return verified(ref, bytes(data), "in the ledger")


def open_store(
    kind: StoreKind, *, data_path: Path, sessions: sessionmaker[Session]
) -> ArtifactStore:
    """The store HERALD_ARTIFACT_STORE names: the data folder's `artifacts/`, or the ledger."""
    if kind == "postgres":
        return PostgresArtifactStore(sessions)
    return FolderArtifactStore(data_path / "artifacts")


def register(session: Session, ref: ArtifactRef) -> Artifact:
    """The ledger's row for a stored artifact.

    The first registration's name and media type stay: the same bytes uploaded again are
    the same artifact.
    """
    session.execute(
        insert(Artifact)
        .values(
            sha256=ref.sha256,
            size=ref.size,
            media_type=ref.media_type,
            filename=ref.filename,
            location=ref.location,
        )
        .on_conflict_do_nothing(index_elements=["sha256"])
    )
    row = session.get(Artifact, ref.sha256)
    assert row is not None
    return row


def ref_of(row: Artifact) -> ArtifactRef:
    """The reference a registered artifact's row names."""
    return ArtifactRef(row.sha256, row.size, row.media_type, row.filename, row.location)


def _fsync_dir(path: Path) -> None:
    # Makes the rename durable; not every platform lets a directory be opened.
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
