"""Where a mount serves its metrics (`--metrics-port`, `--metrics-addr`): an IP address and
port, or a Unix socket (`unix:/PATH`), for which prometheus_client has no server: its
WSGI app is served by wsgiref over the socket, as its own HTTP server serves it over TCP.

The listener is opened before the mount (`listen`), so a place that is taken or refused
ends the start in one line with nothing mounted, and serves from the loop's start on
(`Listener.serve`), in daemon threads of its own: a slow or stuck scraper never holds the
loop, and they end with the server process.
"""

import ipaddress
import os
import socket
import stat
import threading
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from ..errors import BadValue

DEFAULT_HOST = "127.0.0.1"
UNIX = "unix:"
_SUN_PATH = 107  # bytes of a Unix socket's path, as sockaddr_un holds it with its NUL


@dataclass(frozen=True)
class Where:
    """A place to serve metrics: `host` and `port`, or the Unix socket at `path`; `flags`:
    the options as given, for messages."""

    flags: str
    host: str = ""
    port: int = 0
    path: str = ""

    def __str__(self) -> str:
        if self.path:
            return UNIX + self.path
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def where(port: int | None, addr: str | None) -> Where | None:
    """The place --metrics-port and --metrics-addr name (None: neither given, no metrics).
    A port alone listens on 127.0.0.1; an address needs a port, a Unix socket none."""
    if port is None and addr is None:
        return None
    flags = " ".join(f for f in (addr and f"--metrics-addr {addr}", port and f"--metrics-port {port}") if f)
    if addr is not None and addr.startswith(UNIX):
        path = addr[len(UNIX) :]
        if port is not None:
            raise BadValue(f"{flags}: a Unix socket has no port; give one or the other")
        if not path:
            raise BadValue(f"--metrics-addr {addr}: give the socket's path, unix:/PATH")
        path = os.path.abspath(path)
        if len(os.fsencode(path)) > _SUN_PATH:
            raise BadValue(f"--metrics-addr {addr}: a Unix socket's path is at most {_SUN_PATH} bytes")
        return Where(flags, path=path)
    if port is None:
        raise BadValue(f"{flags}: give --metrics-port PORT too (or unix:/PATH, a Unix socket)")
    if not 1 <= port <= 65535:
        raise BadValue(f"--metrics-port {port}: must be a port from 1 to 65535")
    host = DEFAULT_HOST if addr is None else addr.removeprefix("[").removesuffix("]")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise BadValue(
            f"--metrics-addr {addr}: not an IP address (as 127.0.0.1, 0.0.0.0 or ::) nor unix:/PATH"
        ) from None
    return Where(flags, host=host, port=port)


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """A scrape is not worth a line of the server's log."""


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a scrape in progress never holds the server's exit


class _Server6(_Server):
    address_family = socket.AF_INET6


class _UnixServer(_Server):
    address_family = socket.AF_UNIX

    def server_bind(self) -> None:
        # HTTPServer's would take the path for a host name and look it up
        _bind_own(self.socket, str(self.server_address))
        self.server_name, self.server_port = "localhost", 0
        self.setup_environ()

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, _ = self.socket.accept()
        return conn, ("unix", 0)  # a peer of a Unix socket has no address: wsgiref reads one


def _bind_own(sock: socket.socket, path: str) -> None:
    """Bind `sock` at `path`, made 0600: in place of a stale socket of this user's only.
    bind(2) never follows a link nor replaces a file (EADDRINUSE), so a name taken between
    the check and the bind is refused, not replaced.  The umask is the process's: this runs
    before the server starts any thread (main.serve)."""
    _unix_place_free(path, remove=True)
    old = os.umask(0o177)
    try:
        sock.bind(path)
    finally:
        os.umask(old)


def _unix_place_free(path: str, remove: bool) -> None:
    """Refuse `path` unless it is absent or a socket of this user's that nobody answers on
    (a server's that ended without removing it), which `remove` then removes."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not os.path.isdir(os.path.dirname(path)):
            raise BadValue(f"--metrics-addr {UNIX}{path}: no such directory {os.path.dirname(path)}") from None
        return
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid():
        raise BadValue(f"--metrics-addr {UNIX}{path}: exists and is not a socket of this user's; not replaced")
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(path)
        except ConnectionRefusedError:  # stale: nothing listens
            if remove:
                os.unlink(path)
            return
        except OSError as exc:
            raise BadValue(f"--metrics-addr {UNIX}{path}: {exc.strerror or exc}") from None
    raise BadValue(f"--metrics-addr {UNIX}{path}: a server answers on this socket already")


class Listener:
    """A bound, listening metrics endpoint, not yet answering."""

    def __init__(self, place: Where) -> None:
        self.place, self._serving = place, False
        try:
            if place.path:
                self.server: _Server = _UnixServer(place.path, _Quiet)  # type: ignore[arg-type]
                self._ino = os.lstat(place.path).st_ino
            else:
                kind = _Server6 if ":" in place.host else _Server
                self.server = kind((place.host, place.port), _Quiet)
        except OSError as exc:
            raise BadValue(f"{place.flags}: cannot listen on {place} ({exc.strerror or exc})") from None

    def serve(self, *collectors: Any) -> None:
        """Answer every scrape from now with `collectors` and the process's own figures (CPU,
        memory, descriptors, read from /proc at each scrape), on any path."""
        from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app

        registry = CollectorRegistry(auto_describe=False)  # never collects at registration
        for collector in collectors:
            registry.register(collector)
        ProcessCollector(registry=registry)
        self.server.set_app(make_wsgi_app(registry))
        threading.Thread(target=self.server.serve_forever, name="metrics", daemon=True).start()
        self._serving = True

    def close(self) -> None:
        """Stop listening if not yet serving (serving threads end with the process: a
        shutdown would wait out their 0.5 s poll); remove the Unix socket if the name is
        still the one this listener made."""
        if not self._serving:
            self.server.server_close()
        if self.place.path:
            try:
                if os.lstat(self.place.path).st_ino == self._ino:
                    os.unlink(self.place.path)
            except FileNotFoundError:
                pass


def check(place: Where) -> None:
    """Before mounting, in the process that starts the server: the place is free (a port
    taken, or privileged, is said now rather than by the server once started)."""
    if place.path:
        _unix_place_free(place.path, remove=False)
    else:
        Listener(place).close()
