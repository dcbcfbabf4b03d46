"""Servers for the Python tests: started through the project's harness (the
`leasehold-serve` binary), one of each per test session, shared by the tests (each test uses
keys of its own), and stopped at the end.

Under CI (CI=true) a server that is not installed fails the run; elsewhere its tests are
skipped."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Dict, Iterator

import pytest

import leasehold

sys.dont_write_bytecode = True  # keep __pycache__ out of the repository

ROOT = Path(__file__).resolve().parents[3]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
SERVE = os.environ.get("LEASEHOLD_SERVE", str(TARGET / "debug" / "leasehold-serve"))
CLI = os.environ.get("LEASEHOLD_CLI", str(TARGET / "debug" / "leasehold"))
REDIS = ["redis7", "redis8", "valkey9"]
SERVERS = REDIS + ["etcd", "postgres"]
BACKENDS = ["memory"] + SERVERS
CI = os.environ.get("CI") == "true"

_running: Dict[str, "subprocess.Popen[str]"] = {}
_urls: Dict[str, str] = {}
_lockers: Dict[str, leasehold.Locker] = {}


def server_url(name: str) -> str:
    """The URL of server `name` (started on first use)."""
    if name == "memory":
        return "memory://"
    if name not in _urls:
        proc = subprocess.Popen(
            [SERVE, name], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        url = proc.stdout.readline().strip() if proc.stdout else ""
        if not url:
            code = proc.wait()
            message = f"{name}: leasehold-serve exited with {code}"
            if code == 3 and not CI:
                pytest.skip(message + " (not installed)")
            pytest.fail(message)
        _running[name] = proc
        _urls[name] = url
    return _urls[name]


def locker_for(name: str) -> leasehold.Locker:
    if name not in _lockers:
        _lockers[name] = leasehold.Locker(server_url(name))
    return _lockers[name]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _lockers.clear()
    for proc in _running.values():
        if proc.stdin:
            proc.stdin.close()
    for proc in _running.values():
        proc.wait(timeout=60)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def locks(backend: str) -> leasehold.Locker:
    """A Locker on each backend in turn."""
    return locker_for(backend)


@pytest.fixture(params=REDIS)
def redis_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def key() -> str:
    return f"py:{uuid.uuid4().hex[:12]}"


@pytest.fixture
def url(backend: str) -> Iterator[str]:
    yield server_url(backend)
