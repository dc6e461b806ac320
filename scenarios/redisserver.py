"""A private redis-server for a run: on a free port of 127.0.0.1, in memory only, in a
directory of its own; what a scenario with several clients, the tests and bench/shared.py
share their emulated file system's state through (docs/SCALE.md)."""

import shutil
import socket
import subprocess
import time

from ..errors import UserError

START_WITHIN_S = 10.0


class RedisServer:
    """`with RedisServer(workdir) as r:` r.url; stop() and start() again keep the port (a
    restart loses what it held, as a Redis without persistence does)."""

    def __init__(self, workdir: str):
        if shutil.which("redis-server") is None:
            raise UserError("redis-server: not installed (Debian: apt-get install redis-server; ./run.sh installs it)")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "RedisServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.workdir,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + START_WITHIN_S
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise UserError(f"redis-server on port {self.port}: did not start within {START_WITHIN_S:g} s")
            time.sleep(0.02)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False
