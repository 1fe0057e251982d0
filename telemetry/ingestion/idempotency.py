"""Idempotency records of ingest requests shared by every web process: which request keys are
stored, or being stored right now, so a retry that reaches another process is not stored again.

``group_commit.GroupCommit`` always keeps its own in-process record (the embedded default: one
process owns a chDB directory). With several web processes (production, ``REDIS_URL`` set) it
also asks ``RedisRecords`` before queueing a request:

- ``claim(key)`` sets ``precursor:ingest-req:<key>`` to ``pending:<owner>`` only if absent
  (``SET NX``, expiring after ``pending_s``): ``CLAIMED`` -- this process stores the request;
  ``STORED`` -- some process stored it within the record window (a retry: answered 2xx, nothing
  stored); ``PENDING`` -- another process is storing it now: the caller waits until it is stored
  (then ``STORED``) or released (then it claims it itself).
- ``stored(keys)`` after the insert returned: each key becomes ``stored`` for ``window_s``.
- ``release(keys)`` after the insert failed: the claims are dropped (only this owner's), so the
  sender's retry stores the rows, wherever it lands. A process that dies between claiming and
  inserting leaves a claim that expires after ``pending_s``: its request was never answered 2xx,
  and the retry is stored once the claim is gone.

Redis unreachable: the caller goes on with its in-process record (logged): at-least-once
across processes, never a request refused or lost because of it.
"""
from __future__ import annotations

import logging
import os
import uuid

log = logging.getLogger(__name__)

CLAIMED, STORED, PENDING = "claimed", "stored", "pending"
PREFIX = "precursor:ingest-req:"

# Delete a key only while it still holds this owner's claim (it may have expired and been
# claimed by another process since).
_RELEASE_LUA = """
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then redis.call('DEL', key) end
end
return 0
"""


class RedisRecords:
    def __init__(self, url: str, *, window_s: float = 3600, pending_s: float = 120) -> None:
        import redis

        self.client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=2)
        self.window_s = window_s
        self.pending_s = pending_s
        self.owner = f"pending:{uuid.uuid4().hex}"
        self._release = self.client.register_script(_RELEASE_LUA)

    def claim(self, key: str) -> str:
        k = PREFIX + key
        for _ in range(3):  # a claim can vanish between SET NX and GET (released or expired)
            if self.client.set(k, self.owner, nx=True, ex=max(1, int(self.pending_s))):
                return CLAIMED
            value = self.client.get(k)
            if value is None:
                continue
            return STORED if value == b"stored" else PENDING
        return PENDING

    def stored(self, keys: list[str]) -> None:
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.set(PREFIX + key, "stored", ex=max(1, int(self.window_s)))
        pipe.execute()

    def release(self, keys: list[str]) -> None:
        self._release(keys=[PREFIX + k for k in keys], args=[self.owner])


def redis_url() -> str:
    """``REDIS_URL`` as the web settings have it (the environment outside Django)."""
    try:
        from django.conf import settings

        return getattr(settings, "REDIS_URL", "") or ""
    except Exception:  # Django not configured (scripts, the benchmark's own process)
        return os.environ.get("REDIS_URL", "")


def shared_records(window_s: float) -> RedisRecords | None:
    """The records all web processes share, or None (in-process only) without Redis."""
    url = redis_url()
    if not url:
        return None
    try:
        return RedisRecords(url, window_s=window_s)
    except Exception:  # bad URL or redis missing: the in-process record still holds
        log.warning("ingest idempotency records: Redis not usable, records kept in this process", exc_info=True)
        return None
