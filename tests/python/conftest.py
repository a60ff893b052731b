"""Runs the real sonde binary for the Python client tests."""

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def sonde_bin() -> str:
    path = os.environ.get("SONDE_BIN", str(ROOT / "target" / "debug" / "sonde"))
    if not os.path.exists(path):
        pytest.fail(f"sonde binary not found at {path}: run `cargo build` first or set SONDE_BIN")
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, cond, timeout=20.0):
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


class Agent:
    def __init__(self, receivers: str, interval: str = "1h", events: bool = False):
        self.dir = tempfile.TemporaryDirectory()
        self.admin = free_port()
        self.out = Path(self.dir.name) / "points.jsonl"
        self.events_out = Path(self.dir.name) / "events.jsonl"
        cfg = Path(self.dir.name) / "sonde.toml"
        events_sink = (
            f'[[sinks]]\ntype = "file"\npath = "{self.events_out}"\ninputs = ["dogstatsd_events"]\n'
            if events
            else ""
        )
        cfg.write_text(
            f'[agent]\ninterval = "{interval}"\nadmin_listen = "127.0.0.1:{self.admin}"\n'
            f'data_dir = "{self.dir.name}/data"\n'
            f"{receivers}\n"
            f'[[sinks]]\ntype = "file"\npath = "{self.out}"\n'
            f"{events_sink}"
        )
        self.stderr = open(Path(self.dir.name) / "stderr.log", "wb")
        self.proc = subprocess.Popen(
            [sonde_bin(), "run", "--config", str(cfg)],
            stdout=subprocess.DEVNULL,
            stderr=self.stderr,
        )
        wait_for("sonde /health", lambda: self._health())

    def _health(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"sonde exited: {Path(self.stderr.name).read_text()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/metrics", timeout=5) as r:
            return r.read().decode()

    def points_received(self) -> float:
        total = 0.0
        for line in self.metrics().splitlines():
            if line.startswith("sonde_receiver_points_total{"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=20) == 0, Path(self.stderr.name).read_text()

    def points(self):
        if not self.out.exists():
            return []
        return [json.loads(l) for l in self.out.read_text().splitlines() if l]

    def events(self):
        """The records of the `dogstatsd_events` sink (agent made with events=True)."""
        if not self.events_out.exists():
            return []
        return [json.loads(l) for l in self.events_out.read_text().splitlines() if l]

    def metric(self, prefix: str) -> float:
        """The sum of the /metrics samples whose line starts with `prefix`."""
        return sum(
            float(l.rsplit(" ", 1)[1]) for l in self.metrics().splitlines() if l.startswith(prefix)
        )

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()
        self.dir.cleanup()


@pytest.fixture
def agent_factory():
    agents = []

    def make(receivers: str, interval: str = "1h", events: bool = False) -> Agent:
        a = Agent(receivers, interval, events)
        agents.append(a)
        return a

    yield make
    for a in agents:
        a.close()
