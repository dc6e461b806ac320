"""A mount's part in an emulated file system shared with other mounts (--shared URL --fs-id ID).

Every EXCHANGE_EVERY seconds, beside the requests and never in their way, the mount
reports what its requests put through the file system's gates and takes in the
other clients' (emulator/shared.py), one Redis round trip run on a worker thread
(shaping/redis_hub.py).  When Redis does not answer within its bound the mount
serves on its own copy of the state, keeps what it has not reported, says so in
`stats`, the log and the trace's metadata, and tries again every RETRY_EVERY
seconds; once Redis answers, what was kept goes, and the others' reports since are
taken in: the copies agree again.
"""

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import redis
import trio

from ..emulator.model import Model
from ..emulator.shared import ANNOUNCE_EVERY, EXCHANGE_EVERY, SharedClient, base_differences, file_system_base
from ..errors import BadValue, UserError
from .redis_hub import RedisHub, check_url, shown

log = logging.getLogger("fusetrace")

RETRY_EVERY = 1.0  # s between tries while Redis does not answer
JOIN_TRIES = 12  # asking for the base every ANNOUNCE_EVERY / 4 (3 s): live clients announce once a second


def _source_id(source: str) -> str:
    """The backing directory as this kernel knows it: boot id, device and inode."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        st = os.stat(source)
    except OSError:
        return f"{socket.gethostname()}:{source}"
    return f"{boot}:{st.st_dev}:{st.st_ino}"


def check_fs_id(fs_id: str) -> str:
    """The file system id if it is 1 to 64 of letters, digits, '.', '_' and '-'."""
    if not (0 < len(fs_id) <= 64 and all(c.isalnum() or c in "._-" for c in fs_id) and fs_id.isascii()):
        raise BadValue(f"--fs-id {fs_id!r}: expected 1 to 64 letters, digits, '.', '_' or '-'")
    return fs_id


class Sharing:
    def __init__(self, model: Model, url: str, fs_id: str, source: str, clock: Callable[[], float]):
        host = socket.gethostname()
        self._now = clock  # the model's clock
        self.url, self.fs_id = check_url(url), check_fs_id(fs_id)
        self.hub = RedisHub(url, fs_id)
        # unique even where containers share a host name and a pid (1); the source by what it is on
        # this kernel, so that containers sharing one backing directory count its size once
        self.client = SharedClient(model, f"{host}/{os.getpid()}/{uuid.uuid4().hex[:8]}", source=_source_id(source))
        self.state = "starting"
        self.since = time.time()
        self.exchanges = self.failed = 0
        self.outages: list[dict[str, Any]] = []  # {from, to (None: still), error}: wall times

    def join(self) -> None:
        """Before mounting: Redis answers, and this mount emulates the file system with the
        parameters its live clients have (profile and --set); a UserError naming it otherwise."""
        base = file_system_base(self.client.model.params)
        try:
            held = self.hub.join(self.client.client, base)
            for _ in range(JOIN_TRIES):  # Redis restarted empty under live clients: wait for their announce
                if held is not None:
                    break
                time.sleep(ANNOUNCE_EVERY / 4)
                held = self.hub.join(self.client.client, base)
        except redis.RedisError as exc:
            refused = isinstance(exc, redis.AuthenticationError) or "authenticat" in str(exc).lower()
            given = urlsplit(self.url).password is not None or "password=" in urlsplit(self.url).query
            why = (
                "Redis does not answer"
                if not refused
                else "Redis answered but refused this mount's password"
                if given
                else "Redis answered but wants a password (redis://:PASSWORD@HOST:PORT/DB, or ?password=)"
            )
            raise UserError(f"--shared {shown(self.url)}: {why} ({exc})") from None
        if held is None:
            raise UserError(
                f"--fs-id {self.fs_id}: Redis lost its parameters and its live clients have not given "
                f"them back within {JOIN_TRIES * ANNOUNCE_EVERY / 4:g} s; mount again"
            )
        differ = base_differences(base, held)
        if differ:
            try:
                self.hub.leave(self.client.client)  # counted live as it joined: not a client after all
            except redis.RedisError:
                pass  # it ages out in CLIENT_TTL
            raise UserError(
                f"--fs-id {self.fs_id}: its live clients emulate it otherwise ({'; '.join(differ)}): "
                f"mount with the same --emulate and --set, or another --fs-id"
            )

    async def run(self) -> None:
        while True:
            report = self.client.report(self._now())
            try:
                reply = await trio.to_thread.run_sync(self.hub.exchange, report, abandon_on_cancel=True)
            except (redis.RedisError, OSError, ValueError) as exc:  # unreachable, or answered nonsense
                self.client.restore(report)
                self.failed += 1
                self._down(exc)
                await trio.sleep(RETRY_EVERY)
                continue
            refused = dict(self.client.refused)
            try:
                self.client.apply(reply, self._now())
            except Exception as exc:  # an entry this version cannot take: said, and the mount goes on
                log.exception("shared state: an answer from Redis could not be taken in")
                self.failed += 1
                self._down(exc)
                await trio.sleep(RETRY_EVERY)
                continue
            for why in set(self.client.refused.values()) - set(refused.values()):
                log.warning("shared state: another client's set refused here, so the clients differ: %s", why)
            self.exchanges += 1
            self._up()
            # a client catching up takes the rest at once, a batch at a time, letting requests in between
            await trio.sleep(0 if reply.more else EXCHANGE_EVERY)

    def _down(self, exc: Exception) -> None:
        if self.state == "unreachable":
            return
        self.state, self.since = "unreachable", time.time()
        self.outages.append({"from": self.since, "to": None, "error": str(exc)})
        log.warning(
            "shared state: Redis at %s does not answer (%s); serving on this mount's own copy "
            "of file system %s until it does",
            shown(self.url),
            exc,
            self.fs_id,
        )

    def _up(self) -> None:
        if self.state == "ok":
            return
        if self.state == "unreachable":
            self.outages[-1]["to"] = time.time()
            log.warning(
                "shared state: Redis at %s answers again after %.1f s; what this mount kept has gone to the others",
                shown(self.url),
                time.time() - self.since,
            )
        self.state, self.since = "ok", time.time()

    def describe(self) -> dict[str, Any]:
        """For stats and the trace's metadata."""
        return {
            "url": shown(self.url),
            "fs_id": self.fs_id,
            "client": self.client.client,
            "state": self.state,
            "since": self.since,
            "exchanges": self.exchanges,
            "failed": self.failed,
            "round_trips": self.hub.round_trips,
            "clients": self.client.model.clients,
            "outages": list(self.outages),
            "refused_sets": list(self.client.refused.values()),
        }

    def close(self) -> None:
        """At unmount (the loop has stopped): report what is left and leave the file system, if
        Redis answers within its bound; disconnect."""
        try:
            self.hub.exchange(self.client.report(self._now()))  # the last of this mount's usage, and what it kept
            self.hub.leave(self.client.client)
        except (redis.RedisError, OSError, ValueError) as exc:  # it is counted live until CLIENT_TTL passes
            log.warning(
                "shared state: Redis at %s did not answer at unmount (%s): this mount's usage since its "
                "last exchange did not reach the other clients",
                shown(self.url),
                exc,
            )
        self.hub.close()
