"""A policy file of the adopter's own (`herald dev --policy FILE`, HERALD_POLICY_NAME=FILE):
recorded beside the packaged versions under its file's stem, activated as a packaged name
is, and an edited file (a new version) moves the embedded stack onto it."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import policies
from ledger.models import PolicyVersion
from ledger.templates import seed_packaged


def _file(folder: Path, version: str, horizon: int = 10) -> Path:
    demo = policies.load_packaged("demo")
    text = demo.replace('version = "demo-2026-12-07.1"', f'version = "{version}"')
    text = text.replace("sms_poll_horizon_seconds = 60", f"sms_poll_horizon_seconds = {horizon}")
    assert text.count(version) == 1
    path = folder / "short-horizon.toml"
    path.write_text(text)
    return path


def _active(db: Session) -> PolicyVersion:
    return db.execute(select(PolicyVersion).where(PolicyVersion.active.is_(True))).scalar_one()


def test_a_policy_file_is_recorded_and_activated_as_the_stack_starts(
    db: Session, tmp_path: Path
) -> None:
    before = _active(db).version
    path = _file(tmp_path, "short-2026-12-07.1")
    seed_packaged(db, str(path))  # as `herald migrate`: an active choice stands
    assert _active(db).version == before
    recorded = db.get(PolicyVersion, "short-2026-12-07.1")
    assert recorded is not None and recorded.name == "short-horizon"
    assert recorded.document == path.read_text()

    seed_packaged(db, str(path), switch=True)  # as `herald dev --policy FILE`
    assert _active(db).version == "short-2026-12-07.1"
    # The file edited under a new version: the next start moves onto it.
    _file(tmp_path, "short-2026-12-07.2", horizon=20)
    seed_packaged(db, str(path), switch=True)
    assert _active(db).version == "short-2026-12-07.2"


def test_a_file_edited_under_a_recorded_version_is_refused(db: Session, tmp_path: Path) -> None:
    path = _file(tmp_path, "short-2026-12-07.1")
    seed_packaged(db, str(path), switch=True)
    _file(tmp_path, "short-2026-12-07.1", horizon=30)
    with pytest.raises(ValueError, match="exists with a different document"):
        seed_packaged(db, str(path), switch=True)


def test_an_unknown_name_or_an_unreadable_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as named:
        policies.load("nope")
    assert str(named.value) == (
        "no packaged policy named 'nope' (packaged: default, demo; or give a policy "
        "file's path, ending in .toml)"
    )
    with pytest.raises(FileNotFoundError) as missing:
        policies.load(str(tmp_path / "absent.toml"))
    assert str(missing.value) == (
        f"cannot read the policy file {tmp_path / 'absent.toml'}: No such file or directory"
    )
