"""A content-addressed, immutable artifact store (email attachments and the like).

Files live at ``root/<sha256[:2]>/<sha256>``, written through a temporary file and an
atomic rename, then made read-only (0o444). A reference names the content by its hash,
so reading verifies the bytes: if the file on disk no longer hashes to the reference,
:class:`ArtifactMismatch` is raised and nothing is returned. Calls are synchronous file
I/O; from async code run them in a thread (``asyncio.to_thread``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

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
        super().__init__(reason)
        self.reason = reason
        self.sha256 = sha256


class ArtifactMissing(ArtifactError):
    """No artifact with that hash is in the store."""


class ArtifactStore:
    """Immutable content-addressed files under ``root``."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def path_for(self, sha256: str) -> Path:
        if not _SHA256_HEX.match(sha256):
            # Guards the path too: a reference can never point outside the store.
            raise ValueError(f"not a lowercase hex SHA-256: {sha256!r}")
        return self.root / sha256[:2] / sha256

    def put(self, data: bytes, *, media_type: str, filename: str) -> ArtifactRef:
        """Store ``data`` (idempotent: the same bytes give the same reference)."""
        digest = hashlib.sha256(data).hexdigest()
        target = self.path_for(digest)
        ref = ArtifactRef(digest, len(data), media_type, filename, str(target))
        if target.exists():
            # Already there: it must still be the same bytes, or the store was tampered with.
            self.read_verified(ref)
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

    def read_verified(self, ref: ArtifactRef) -> bytes:
        """The artifact's bytes, only if they still match ``ref`` (size and SHA-256)."""
        path = self.path_for(ref.sha256)
        try:
            data = path.read_bytes()
        except FileNotFoundError as exc:
            raise ArtifactMissing(f"artifact {ref.sha256[:12]}... is not in the store") from exc
        if len(data) != ref.size:
            raise ArtifactMismatch(
                f"artifact {ref.sha256[:12]}... ({ref.filename}) is {len(data)} bytes on disk, "
                f"the reference says {ref.size}: refusing to use it",
                sha256=ref.sha256,
            )
        actual = hashlib.sha256(data).hexdigest()
        if actual != ref.sha256:
            raise ArtifactMismatch(
                f"artifact {ref.sha256[:12]}... ({ref.filename}) now hashes to {actual[:12]}...: "
                "the file was changed after it was stored; refusing to use it",
                sha256=ref.sha256,
            )
        return data


def _fsync_dir(path: Path) -> None:
    # Makes the rename durable; not every platform lets a directory be opened.
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
