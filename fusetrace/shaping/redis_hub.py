"""The hub of a file system shared by clients on several hosts (emulator/shared.py), in Redis.

One exchange is one round trip: a Lua script, run by Redis atomically, appends the
client's report (its usage since the last, and its running totals) to the file system's
log (a stream), reads the others' reports
since the client's last, marks the client live and counts the live ones, and keeps
the stored size per source, all against Redis's own clock (TIME), so hosts whose
clocks differ agree on who is live.  Keys, for file system ID:

    fusetrace:{ID}:log       stream: one entry per report with usage or sets
    fusetrace:{ID}:clients   sorted set: client -> when it last reported (Redis time)
    fusetrace:{ID}:stored    hash: source -> bytes;  fusetrace:{ID}:sources  sorted set: source -> when
    fusetrace:{ID}:balance   the burst credit balance last reported

Calls block (with a timeout): run exchange() off the trio loop (emulation.py does).
"""

import json
import math
from urllib.parse import urlsplit

import redis

from ..emulator.shared import CLIENT_TTL, SOURCE_TTL, Reply, Report
from ..errors import UserError

TIMEOUT_S = 0.25  # no exchange waits longer than this for Redis; the mount serves on regardless
LOG_LENGTH = 100_000  # reports kept: minutes of a fleet's history, for a client catching up after an outage
BATCH = 1000  # reports one answer holds at most: a client catching up exchanges again at once for more
KEEP_MS = 86_400_000  # a file system's keys go a day after its last exchange


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value

_EXCHANGE = """
local p, client, cursor, usage, sets = KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local source, stored, balance = ARGV[5], ARGV[6], ARGV[7]
local client_ttl, source_ttl, keep = tonumber(ARGV[8]), tonumber(ARGV[9]), ARGV[10]
local totals, announce, batch, keep_ms = ARGV[11], ARGV[12], tonumber(ARGV[13]), ARGV[14]
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
redis.call('ZADD', p .. ':clients', now, client)
redis.call('ZREMRANGEBYSCORE', p .. ':clients', '-inf', now - client_ttl)
local clients = redis.call('ZCARD', p .. ':clients')
if tonumber(stored) >= 0 then
  redis.call('HSET', p .. ':stored', source, stored)
  redis.call('ZADD', p .. ':sources', now, source)
end
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', p .. ':sources', '-inf', now - source_ttl)) do
  redis.call('HDEL', p .. ':stored', gone)
end
redis.call('ZREMRANGEBYSCORE', p .. ':sources', '-inf', now - source_ttl)
local total, any = 0, 0
for _, v in ipairs(redis.call('HVALS', p .. ':stored')) do total, any = total + tonumber(v), 1 end
local prior = ''
if clients > 1 then prior = redis.call('GET', p .. ':balance') or '' end
if balance ~= '' then redis.call('SET', p .. ':balance', balance) end
for _, kv in ipairs(cjson.decode(sets)) do redis.call('HSET', p .. ':params', kv[1], cjson.encode(kv[2])) end
local known = false
local entries = {}
if cursor == '' then
  known = redis.call('HGETALL', p .. ':totals')
  local last = redis.call('XREVRANGE', p .. ':log', '+', '-', 'COUNT', 1)
  cursor = last[1] and last[1][1] or '0-0'
else
  entries = redis.call('XRANGE', p .. ':log', '(' .. cursor, '+', 'COUNT', batch)
  if #entries > 0 then cursor = entries[#entries][1] end
end
redis.call('HSET', p .. ':totals', client, totals)
if usage ~= '[]' or sets ~= '[]' or announce == '1' then
  redis.call('XADD', p .. ':log', 'MAXLEN', '~', keep, '*', 'c', client, 'u', usage, 't', totals)
end
for _, k in ipairs({':clients', ':stored', ':sources', ':balance', ':params', ':totals', ':log'}) do
  redis.call('PEXPIRE', p .. k, keep_ms)
end
local got = {}
for _, e in ipairs(entries) do
  local f = e[2]
  if f[2] ~= client then table.insert(got, f[2]); table.insert(got, f[4]); table.insert(got, f[6]) end
end
return {cursor, clients, any == 1 and tostring(total) or '', prior, #entries == batch and 1 or 0,
        redis.call('HGETALL', p .. ':params'), known, got}
"""


def check_url(url: str) -> str:
    """The URL if it names a Redis server (redis://, rediss:// or unix://); UserError otherwise."""
    if urlsplit(url).scheme not in ("redis", "rediss", "unix"):
        raise UserError(f"--shared {shown(url)}: expected a Redis URL, e.g. redis://127.0.0.1:6379/0")
    return url


def shown(url: str) -> str:
    """The URL without its password (before the host, or ?password=), for stats, logs,
    messages and trace metadata."""
    parts = urlsplit(url)
    if parts.password is not None:
        netloc = f"{parts.username or ''}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
        parts = parts._replace(netloc=netloc)
    query = "&".join("password=***" if q.split("=", 1)[0] == "password" else q for q in parts.query.split("&")) \
        if parts.query else ""
    return parts._replace(query=query).geturl()


class RedisHub:
    """emulator.shared.Hub over Redis: one Lua script per exchange."""

    def __init__(self, url: str, fs_id: str):
        self.url, self.fs_id = check_url(url), fs_id
        self._redis = redis.Redis.from_url(url, socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S,
                                           retry_on_timeout=False)
        self._script = self._redis.register_script(_EXCHANGE)
        self._cursors: dict[str, str] = {}  # per client: the last report it read (none: joining)
        self.round_trips = 0

    def ping(self) -> None:
        """A round trip now; redis.RedisError if Redis does not answer."""
        self._redis.ping()

    def exchange(self, report: Report) -> Reply:
        usage = json.dumps(report.usage, separators=(",", ":"))
        sets = json.dumps(report.sets, separators=(",", ":"))
        balance = "" if math.isnan(report.balance) else repr(report.balance)
        self.round_trips += 1
        out = self._script(keys=[f"fusetrace:{self.fs_id}"], args=[
            report.client, self._cursors.get(report.client, ""), usage, sets, report.source,
            repr(report.stored), balance, CLIENT_TTL, SOURCE_TTL, LOG_LENGTH,
            json.dumps(report.totals, separators=(",", ":")), "1" if report.announce else "0",
            BATCH, KEEP_MS])
        cursor, clients, stored, prior, more, params, known, got = out
        self._cursors[report.client] = _text(cursor)
        reports = [(_text(got[i]), [tuple(u) for u in json.loads(got[i + 1])],
                    [tuple(t) for t in json.loads(got[i + 2])]) for i in range(0, len(got), 3)]
        return Reply(reports=reports, params={_text(params[i]): json.loads(params[i + 1])
                                              for i in range(0, len(params), 2)},
                     known=None if not known else {
                         _text(known[i]): [tuple(t) for t in json.loads(known[i + 1])]
                         for i in range(0, len(known), 2) if _text(known[i]) != report.client},
                     more=bool(more), clients=int(clients), stored=float(stored) if stored else -1.0,
                     balance=float(prior) if prior else math.nan)

    def leave(self, client: str) -> None:
        """`client` is gone: counted out of ClientConnections now, not when its report ages."""
        self._redis.zrem(f"fusetrace:{self.fs_id}:clients", client)
        self._redis.hdel(f"fusetrace:{self.fs_id}:totals", client)

    def close(self) -> None:
        self._redis.close()
