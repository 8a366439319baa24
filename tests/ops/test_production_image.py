"""The production image, checked without Docker: it is built from requirements.lock (every
runtime dependency pinned, with hashes), it copies every package the worker, the API and
the CLI import and none of the dev stack, simulators, bench or scenarios; and the runtime
runs without them: nothing imports them on the worker or API path, and `herald dev` there
says so in one line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from cli.errors import DEV_STACK_MODULES

ROOT = Path(__file__).resolve().parents[2]
HERALD = str(Path(sys.executable).with_name("herald"))
LOCK = ROOT / "requirements.lock"
BUILD_LOCK = ROOT / "requirements-build.lock"
DOCKERFILE = ROOT / "Dockerfile"
DEV_ONLY_TREES = {"devstack", "simulators", "bench", "scenarios", "tests"}

_PINNED = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.MULTILINE)


def pins(lock_text: str) -> dict[str, str]:
    return {canonicalize_name(name): version for name, version in _PINNED.findall(lock_text)}


def unlocked(wanted: list[str], lock_text: str) -> list[str]:
    """Requirements the lock does not pin to a version they allow: each is a dependency
    added or raised without `make lock`."""
    pinned = pins(lock_text)
    problems = []
    for line in wanted:
        requirement = Requirement(line)
        version = pinned.get(canonicalize_name(requirement.name))
        if version is None:
            problems.append(f"{requirement.name} is not in the lock")
        elif not requirement.specifier.contains(version, prereleases=True):
            problems.append(f"{requirement.name}=={version} does not satisfy {requirement}")
    return problems


def pyproject() -> dict:  # type: ignore[type-arg]
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_locks_pin_every_runtime_dependency_and_the_build_backend():
    assert unlocked(pyproject()["project"]["dependencies"], LOCK.read_text()) == []
    assert unlocked(pyproject()["build-system"]["requires"], BUILD_LOCK.read_text()) == []


def test_a_dependency_added_without_relocking_is_found():
    wanted = [*pyproject()["project"]["dependencies"], "tenacity>=8"]
    wanted[0] = "temporalio>=99"
    problems = unlocked(wanted, LOCK.read_text())
    assert "tenacity is not in the lock" in problems
    assert any(p.startswith("temporalio==") for p in problems)


@pytest.mark.parametrize("lock", [LOCK, BUILD_LOCK], ids=lambda p: p.name)
def test_every_pin_in_the_locks_carries_hashes(lock):
    text = lock.read_text()
    blocks = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 2)[2])
    assert len(blocks) == len(pins(text)) >= 1
    for block in blocks:
        assert "--hash=sha256:" in block, block.splitlines()[0]


def test_the_lock_holds_no_dev_stack_and_no_test_tools():
    pinned = pins(LOCK.read_text())
    extras = pyproject()["project"]["optional-dependencies"]
    for line in extras["dev-stack"] + [r for r in extras["dev"] if "herald[" not in r]:
        name = canonicalize_name(Requirement(line).name)
        assert name not in pinned, f"{name} is a dev-only package in the production lock"


def dockerfile_copies() -> set[str]:
    copied: set[str] = set()
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith("COPY "):
            copied.update(Path(source).as_posix() for source in line.split()[1:-1])
    return copied


def test_the_image_installs_from_the_lock_then_herald_without_resolving():
    text = DOCKERFILE.read_text()
    build = "pip install --require-hashes --no-deps -r requirements-build.lock"
    runtime = "pip install --require-hashes --no-deps --no-build-isolation -r requirements.lock"
    assert build in text and runtime in text
    assert text.index(build) < text.index(runtime)
    assert "pip install --no-deps --no-build-isolation ." in text
    # The lock is installed before Herald's code is copied (its own cached layer).
    assert text.index("-r requirements.lock") < text.index("COPY domain")


def test_the_image_copies_no_dev_stack_simulators_bench_scenarios_or_tests():
    assert not dockerfile_copies() & DEV_ONLY_TREES


def test_the_build_context_admits_exactly_what_the_dockerfile_copies():
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert "*" in ignore, "the .dockerignore is an allow-list"
    admitted = {line[1:] for line in ignore if line.startswith("!")}
    assert admitted == dockerfile_copies()
    for source in admitted:
        assert (ROOT / source).exists(), source


def test_the_image_copies_every_module_the_worker_the_api_and_the_cli_import():
    """The top-level packages and modules of this repository that the runtime's import
    closure reaches: a new package the worker needs, missing from the Dockerfile, fails."""
    probe = (
        "import sys, importlib, pathlib\n"
        "import worker, api.server, cli.main\n"
        "cli.main.parser()\n"
        "for name in cli.main.COMMAND_MODULES: importlib.import_module(name)\n"
        f"root = pathlib.Path({str(ROOT)!r})\n"
        "venv = pathlib.Path(sys.prefix).resolve()\n"
        "for module in list(sys.modules.values()):\n"
        "    path = getattr(module, '__file__', None)\n"
        "    if not path or pathlib.Path(path).resolve().is_relative_to(venv):\n"
        "        continue  # an installed package: the lock's\n"
        "    if pathlib.Path(path).resolve().is_relative_to(root):\n"
        "        print(pathlib.Path(path).resolve().relative_to(root).parts[0])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    reached = set(done.stdout.split())
    assert {"worker.py", "settings.py", "api", "ledger", "workflows"} <= reached
    assert reached <= dockerfile_copies(), reached - dockerfile_copies()


# --- the runtime without the dev stack -----------------------------------------------------


@pytest.fixture
def without_dev_stack(tmp_path: Path) -> dict[str, str]:
    """An environment whose interpreters cannot import the dev stack, the simulators, bench,
    scenarios or the `dev-stack` extra's packages, as in the production image: a
    sitecustomize puts a finder first on the meta path that refuses them."""
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\n"
        f"BLOCKED = {sorted(DEV_STACK_MODULES)!r}\n"
        "class NoDevStack:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.partition('.')[0] in BLOCKED:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "        return None\n"
        "sys.meta_path.insert(0, NoDevStack())\n"
    )
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "HERALD_DATA_DIR": str(tmp_path / "data"),
    }


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    said = done.stderr.strip()
    assert len(said.splitlines()) == 1, said
    assert "Traceback" not in said
    return said


def test_the_blocker_does_block(without_dev_stack):
    done = run([sys.executable, "-c", "import devstack"], without_dev_stack)
    assert done.returncode == 1 and "No module named 'devstack'" in done.stderr


def test_the_worker_and_the_api_import_nothing_of_the_dev_stack(without_dev_stack):
    probe = (
        "import sys, worker, api.app, api.server, cli.main, cli.ops, starter.client\n"
        f"blocked = {sorted(DEV_STACK_MODULES)!r}\n"
        "print([m for m in sys.modules if m.partition('.')[0] in blocked])\n"
    )
    done = run([sys.executable, "-c", probe], without_dev_stack)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("command", [["dev"], ["demo", "sms"], ["bench"]])
def test_a_dev_stack_command_without_the_dev_stack_says_so_in_one_line(without_dev_stack, command):
    done = run([HERALD, *command], without_dev_stack)
    assert done.returncode == 2
    said = one_line(done)
    assert said.startswith(f"herald {command[0]}: this installation has no dev stack"), said


def production_env(env: dict[str, str], closed_port: int) -> dict[str, str]:
    return {
        **env,
        "HERALD_ENV": "production",
        "HERALD_DATABASE_URL": f"postgresql+psycopg://herald@127.0.0.1:{closed_port}/herald",
        "HERALD_TEMPORAL_ADDRESS": f"127.0.0.1:{closed_port}",
        "HERALD_OPERATOR_TOKEN": "image-test-token",
        "HERALD_SMS_AUTH_TOKEN": "image-test-sms-token",
        "HERALD_UNSUBSCRIBE_SECRET": "image-test-unsubscribe",
        "HERALD_DATA_KEY": "t1:" + "a" * 43 + "=",
        # Production takes no dev default for where messages and callbacks go.
        "HERALD_PUBLIC_BASE_URL": "https://hooks.example.com",
        "HERALD_SMS_BASE_URL": "https://api.twilio.example.com",
        "HERALD_SMTP_HOST": "smtp.example.com",
    }


@pytest.fixture
def closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_herald_api_and_migrate_report_a_missing_service_without_the_dev_stack(
    without_dev_stack, closed_port
):
    """Their errors go through `cli.errors.operational_error`, which knew the dev stack's
    error types by importing them: without it, that import was a traceback instead."""
    env = production_env(without_dev_stack, closed_port)
    api = run([HERALD, "api", "--port", str(closed_port)], env)
    assert api.returncode == 2
    assert "cannot reach Temporal" in one_line(api)
    migrate = run([HERALD, "migrate"], env)
    assert migrate.returncode == 2
    assert "cannot use the ledger database" in one_line(migrate)
