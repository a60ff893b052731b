"""Fixtures for the SDK tests: receiving sockets, clients that are always
closed, and the real sonde binary for the end-to-end test.

The agent runner follows tests/python/conftest.py (a config of its own in a
temp dir, /health to know it is up, /metrics to know what it received,
SIGTERM to flush), copied rather than imported so this SDK's tests stand
alone.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import urllib.request
from pathlib import Path
from typing import Callable, Iterator, List

import pytest

from sonde_client import Client
from sonde_test_support import DatagramReceiver, free_tcp_port, wait_for

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def sock_dir() -> Iterator[str]:
    # Not tmp_path: unix socket paths are limited to 107 bytes, and pytest's
    # per-test directories under long test names can exceed that.
    d = tempfile.mkdtemp(prefix="sonde-sdk-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def receiver(sock_dir: str) -> Iterator[DatagramReceiver]:
    r = DatagramReceiver("unixgram", os.path.join(sock_dir, "metric.sock"))
    yield r
    r.close()


@pytest.fixture
def make_client() -> Iterator[Callable[..., Client]]:
    clients: List[Client] = []

    def make(*args: object, **kwargs: object) -> Client:
        c = Client(*args, **kwargs)  # type: ignore[arg-type]
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.close()


# ------------------------------------------------------------ real agent


def sonde_bin() -> str:
    path = os.environ.get("SONDE_BIN", str(REPO / "target" / "debug" / "sonde"))
    if not os.path.exists(path):
        message = f"sonde binary not found at {path}: run `cargo build` or set SONDE_BIN"
        if os.environ.get("SONDE_REQUIRE_E2E") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


class Agent:
    """The sonde binary with a config of its own; stop() flushes the window."""

    def __init__(self, binary: str, receivers: str, workdir: str) -> None:
        self.dir = Path(workdir)
        self.admin = free_tcp_port()
        self.out = self.dir / "points.jsonl"
        cfg = self.dir / "sonde.toml"
        cfg.write_text(
            f'[agent]\ninterval = "1h"\nadmin_listen = "127.0.0.1:{self.admin}"\n'
            f'data_dir = "{self.dir}"\n'
            f"{receivers}\n"
            f'[[sinks]]\ntype = "file"\npath = "{self.out}"\n'
        )
        self.stderr_path = self.dir / "stderr.log"
        self.stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [binary, "run", "--config", str(cfg)], stdout=subprocess.DEVNULL, stderr=self.stderr
        )
        wait_for("sonde /health", self._healthy, timeout=20)

    def _healthy(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"sonde exited: {self.stderr_path.read_text()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/metrics", timeout=5) as r:
            return r.read().decode()

    def metric_sum(self, metric: str) -> float:
        total = 0.0
        for line in self.metrics().splitlines():
            if line.startswith(metric + "{") or line.startswith(metric + " "):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=20) == 0, self.stderr_path.read_text()

    def points(self) -> List[dict]:
        if not self.out.exists():
            return []
        return [json.loads(line) for line in self.out.read_text().splitlines() if line]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()


@pytest.fixture
def agent_factory(sock_dir: str) -> Iterator[Callable[[str], Agent]]:
    binary = sonde_bin()
    agents: List[Agent] = []

    def make(receivers: str) -> Agent:
        a = Agent(binary, receivers, sock_dir)
        agents.append(a)
        return a

    yield make
    for a in agents:
        a.close()
