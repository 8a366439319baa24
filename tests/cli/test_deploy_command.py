"""`herald deploy` refuses what it cannot do in one line, before it talks to Temporal; the
worker's deployment version follows the settings (the rollout itself:
tests/e2e/test_rollout.py)."""

from __future__ import annotations

import re
from pathlib import Path

import settings as settings_module
import worker
from runtime.logs import redact
from tests.cli.conftest import assert_one_line_error, run_installed_herald


def test_a_ramp_outside_0_to_100_is_refused_naming_it(tmp_path: Path) -> None:
    for ramp in ("0", "100", "150", "-5"):
        done = run_installed_herald(
            "deploy", "promote", "0.2.0+1a2b3c4", "--ramp", ramp,
            settings={"HERALD_DATA_DIR": str(tmp_path)}, cwd=tmp_path,
        )  # fmt: skip
        line = assert_one_line_error(done, "deploy")
        assert done.returncode == 2 and f"--ramp: {float(ramp):g} is not a share" in line


def test_with_versioning_off_deploy_says_the_workers_are_unversioned(tmp_path: Path) -> None:
    done = run_installed_herald(
        "deploy", "status",
        settings={"HERALD_DATA_DIR": str(tmp_path), "HERALD_WORKER_VERSIONING": "false"},
        cwd=tmp_path,
    )  # fmt: skip
    assert "HERALD_WORKER_VERSIONING is off" in assert_one_line_error(done, "deploy")


def test_the_workers_version_is_the_deployment_and_build_of_the_settings() -> None:
    cfg = settings_module.Settings(worker_deployment="notify", build_id="2.0.0+abc1234")
    version = worker.deployment_version(cfg)
    assert version is not None
    assert (version.deployment_name, version.build_id) == ("notify", "2.0.0+abc1234")
    assert worker.deployment_version(settings_module.Settings(worker_versioning=False)) is None


def test_the_default_build_id_is_the_version_and_the_checkouts_commit() -> None:
    # This test runs from a git checkout: the commit is known.
    build = settings_module.Settings().resolved_build_id()
    assert re.fullmatch(r"\d+\.\d+\.\d+\+g[0-9a-f]{7,}", build), build
    # Logged as it is (a commit of bare digits after `+` would be masked as a phone number).
    assert redact(f"build herald:{build}") == (f"build herald:{build}", False)
    assert redact("build herald:0.1.0+g3506597") == ("build herald:0.1.0+g3506597", False)
