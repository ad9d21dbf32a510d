"""Slots for model calls: at most AGENT_MODEL_CONCURRENCY calls in flight for the installation
and AGENT_MODEL_CONCURRENCY_PER_TENANT for one tenant, counted in Redis so that every worker
process and thread shares the same count.

Each cap is a sorted set of slot tokens scored by when the slot expires; a Lua script drops the
expired ones and takes a slot in every set at once, or in none. A slot expires by itself
(the model call's timeout plus a margin), so a worker killed mid-call frees its slots without
anyone cleaning up. A run that finds no free slot waits for one: the caps are a queue, not a
failure.

When Redis cannot be reached the call goes ahead without a slot (logged): the broker is the
same Redis, so no new run starts meanwhile, and the provider's own rate limit (a 429, waited
out by the loop) is the cap that remains. Without a Redis URL (the embedded default: one
process) there is no cap at all.
"""

import functools
import logging
import random
import time
import uuid
from collections.abc import Callable
from contextlib import contextmanager

import redis
from django.conf import settings

logger = logging.getLogger(__name__)

KEY_PREFIX = "refundagent:model-slots"

# KEYS: the sets; ARGV: the token, the slot's lifetime in ms, then each set's cap (0: no cap).
_ACQUIRE = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local ttl = tonumber(ARGV[2])
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now_ms)
  local cap = tonumber(ARGV[2 + i])
  if cap > 0 and redis.call('ZCARD', key) >= cap then
    return 0
  end
end
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, now_ms + ttl, ARGV[1])
  redis.call('PEXPIRE', key, ttl)
end
return 1
"""


@functools.cache
def _client(url: str) -> redis.Redis:
    # Short timeouts: a Redis that hangs must not hold a run longer than one that is down.
    return redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)


@functools.cache
def _script(url: str):
    return _client(url).register_script(_ACQUIRE)


def _keys(tenant_id: int) -> tuple[list[str], list[int]]:
    return (
        [f"{KEY_PREFIX}:all", f"{KEY_PREFIX}:tenant:{tenant_id}"],
        [settings.AGENT_MODEL_CONCURRENCY, settings.AGENT_MODEL_CONCURRENCY_PER_TENANT],
    )


def _slot_seconds() -> float:
    return settings.ANTHROPIC_TIMEOUT_SECONDS + 30


@contextmanager
def model_slot(*, tenant_id: int, waiting: Callable[[float], None] | None = None):
    """Hold one slot of the installation's and the tenant's caps for the block, waiting for one
    while both are not free. `waiting(seconds_waited)` is called every few seconds of a wait
    (the loop renews its lease there). Yields the seconds waited."""
    url = settings.AGENT_MODEL_SLOTS_REDIS_URL
    keys, caps = _keys(tenant_id)
    if not url or not any(caps):
        yield 0.0
        return
    token = uuid.uuid4().hex
    started = time.monotonic()
    last_told = started
    held = False
    while True:
        try:
            held = bool(_script(url)(keys=keys, args=[token, int(_slot_seconds() * 1000), *caps]))
        except redis.RedisError as exc:
            logger.warning("model slots: Redis is unreachable (%s); calling the model without a slot", exc)
            break
        if held:
            break
        now = time.monotonic()
        if waiting is not None and now - last_told >= 5:
            waiting(now - started)
            last_told = now
        time.sleep(random.uniform(0.05, 0.25))
    try:
        yield time.monotonic() - started
    finally:
        if held:
            try:
                pipe = _client(url).pipeline()
                for key in keys:
                    pipe.zrem(key, token)
                pipe.execute()
            except redis.RedisError:
                pass  # the slot expires by itself


def model_slots_in_use(*, tenant_id: int | None = None) -> int:
    """How many slots are held now (installation-wide, or one tenant's); 0 without Redis."""
    url = settings.AGENT_MODEL_SLOTS_REDIS_URL
    if not url:
        return 0
    key = f"{KEY_PREFIX}:all" if tenant_id is None else f"{KEY_PREFIX}:tenant:{tenant_id}"
    client = _client(url)
    seconds, micros = client.time()
    return client.zcount(key, seconds * 1000 + micros // 1000, "+inf")
