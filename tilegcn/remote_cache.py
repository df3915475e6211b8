"""A fleet's shared cache: compiled kernels and tuning records on Redis (``$TILEGCN_REMOTE_CACHE``).

Set ``TILEGCN_REMOTE_CACHE=redis://host:port/db`` (``rediss://`` for TLS; a password as
``redis://:secret@host:port/0``) and every host of a fleet shares what any one of them compiled or tuned:

- a local disk-cache miss asks Redis (`cache.Cache.get_or_build`); an entry found there is verified (see
  `cache._remote_entry_problem`) before any byte of it is used, then written through to the local cache,
  signed with the local cache's key, its meta.json recording ``"origin": "remote"``;
- a kernel built locally is published: one Redis hash per entry written with a single HSET, so a reader sees
  the whole entry or none of it, and a writer (or server) killed mid-write leaves nothing;
- tuning records (`autotune.py`) are shared the same way: `fetch_tuning_record` on a record miss,
  `publish_tuning_record` after a record is written.

This module only moves bytes; the cache decides what is trusted. A Redis that is down or slow costs at
most CONNECT_TIMEOUT_S / OP_TIMEOUT_S once: the first failure warns (`RemoteCacheWarning`, once per process)
and the remote is skipped for BACKOFF_S seconds; tilegcn goes on with the local cache alone.

The `redis` package is imported only when the variable is set (``pip install redis``, or the ``remote``
extra of tilegcn). It imports nothing of tilegcn's but the errors, so the cache can import it.
"""
from __future__ import annotations

import contextlib
import os
import time
import urllib.parse
import warnings
from pathlib import Path

from .errors import CacheError

ENV_REMOTE_CACHE = "TILEGCN_REMOTE_CACHE"
# Set by a process whose remote failed, for the processes it starts (the autotuner's compile workers): "URL
# UNTIL" (a wall-clock time). They start in the same backoff, silently: the parent has warned.
ENV_DOWN = "TILEGCN_REMOTE_CACHE_DOWN"
CONNECT_TIMEOUT_S = 0.5  # a fleet's Redis is near: a host that cannot be reached in this long is down
OP_TIMEOUT_S = 2.0  # one command (a kernel entry is tens of KiB): a server slower than this counts as down
BACKOFF_S = 60.0  # after a failure the remote is not asked again for this long (no timeout per compile)
KEY_PREFIX = "tilegcn:v1:"  # Redis keys: tilegcn:v1:kernel:<cache key>, tilegcn:v1:tune:<record name>
ENTRY_FILES = ("kernel.ir", "kernel.s", "kernel.hsaco", "meta.json")
SCHEMES = ("redis", "rediss", "unix")


class RemoteCacheWarning(UserWarning):
    """The remote cache ($TILEGCN_REMOTE_CACHE) failed (down, slow, refused a command): tilegcn uses the
    local cache only for a while."""


def configured() -> bool:
    """Whether $TILEGCN_REMOTE_CACHE is set (the cost of the check on a local miss when it is not)."""
    return bool(os.environ.get(ENV_REMOTE_CACHE, "").strip())


_stores: dict = {}  # url -> RemoteStore, so the backoff and the one warning hold for the whole process


def store() -> "RemoteStore | None":
    """The remote store $TILEGCN_REMOTE_CACHE names, or None when it is not set. CacheError when the URL is
    malformed or the redis package is missing."""
    url = os.environ.get(ENV_REMOTE_CACHE, "").strip()
    if not url:
        return None
    found = _stores.get(url)
    if found is None:
        found = _stores[url] = RemoteStore(url)
    return found


def redacted(url: str) -> str:
    """`url` with its password replaced by ***, for messages and meta.json."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


def _import_redis():
    try:
        import redis
    except ImportError:
        raise CacheError(f"tilegcn: {ENV_REMOTE_CACHE} is set but the redis package is not installed: "
                         f"pip install redis (or pip install 'tilegcn[remote]'), or unset {ENV_REMOTE_CACHE} "
                         "to use the local cache only") from None
    return redis


class RemoteStore:
    """One Redis server of the fleet. Every method returns None/False instead of raising when the server
    fails: the first failure warns once, then the server is skipped for BACKOFF_S seconds."""

    def __init__(self, url: str):
        self.url = redacted(url)
        scheme = urllib.parse.urlsplit(url).scheme
        if scheme not in SCHEMES:
            raise CacheError(f"tilegcn: {ENV_REMOTE_CACHE}={self.url!r} is not a Redis URL; write "
                             "redis://host:port/db (rediss:// for TLS, unix:///path/to/socket), e.g. "
                             "redis://127.0.0.1:6379/0")
        redis = _import_redis()
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self._errors = (redis.RedisError, OSError)
        try:
            self.client = redis.Redis.from_url(
                url, socket_connect_timeout=CONNECT_TIMEOUT_S, socket_timeout=OP_TIMEOUT_S,
                retry=Retry(NoBackoff(), 0))  # no retries: one timeout, then the backoff
        except ValueError as e:
            raise CacheError(f"tilegcn: {ENV_REMOTE_CACHE}={self.url!r} is not a usable Redis URL ({e}); "
                             "write redis://host:port/db, e.g. redis://127.0.0.1:6379/0") from None
        self._down_until = 0.0
        self._warned = False
        self.failures = 0
        self._inherit_backoff()

    def _inherit_backoff(self) -> None:
        """Start in the backoff a parent process announced for this URL (see ENV_DOWN), without a warning."""
        url, _, until = os.environ.get(ENV_DOWN, "").rpartition(" ")
        try:
            left = float(until) - time.time()
        except ValueError:
            return
        if url == self.url and left > 0:
            self._down_until, self._warned = time.monotonic() + min(left, BACKOFF_S), True

    def _call(self, what: str, command):
        """command() or None when the server fails (then: warn once, back off)."""
        if time.monotonic() < self._down_until:
            return None
        try:
            return command()
        except self._errors as e:
            self.failures += 1
            self._down_until = time.monotonic() + BACKOFF_S
            os.environ[ENV_DOWN] = f"{self.url} {time.time() + BACKOFF_S}"  # for the processes this one starts
            with contextlib.suppress(Exception):
                self.client.connection_pool.disconnect()  # a half-written command must not be reused
            if not self._warned:
                self._warned = True
                warnings.warn(
                    f"tilegcn: the remote cache {self.url} ({ENV_REMOTE_CACHE}) failed to {what} "
                    f"({type(e).__name__}: {e}); using the local cache only (the remote is tried again after "
                    f"{BACKOFF_S:g} s; this warning is not repeated)", RemoteCacheWarning, stacklevel=4)
            return None

    # -- kernels: one hash per entry ---------------------------------------------------------------------------
    def fetch_entry(self, key: str) -> dict | None:
        """{file name: bytes} of the entry published under `key` (unverified), or None."""
        fields = self._call("read a kernel", lambda: self.client.hgetall(f"{KEY_PREFIX}kernel:{key}"))
        if not fields:
            return None
        return {name.decode(errors="replace"): value for name, value in fields.items()}

    def publish_entry(self, key: str, files: dict) -> bool:
        """Publish {file name: bytes} under `key` with one HSET: readers see all of it or none of it."""
        return self._call("publish a kernel",
                          lambda: self.client.hset(f"{KEY_PREFIX}kernel:{key}", mapping=files)) is not None

    # -- tuning records: one string per record ----------------------------------------------------------------
    def fetch_record(self, name: str) -> bytes | None:
        return self._call("read a tuning record", lambda: self.client.get(f"{KEY_PREFIX}tune:{name}"))

    def publish_record(self, name: str, data: bytes) -> bool:
        return self._call("publish a tuning record",
                          lambda: self.client.set(f"{KEY_PREFIX}tune:{name}", data)) is not None


# -- the autotuner's hooks (tilegcn/autotune.py) ----------------------------------------------------------------
RECORD_LIMIT = 4 << 20  # as cache.SMALL_FILE_LIMIT: a tuning record is a few KiB


def fetch_tuning_record(path: Path) -> bool:
    """On a tuning-record miss: copy the record another host published under `path`'s name into `path`
    (atomically, 0600), marked ``"origin": "remote"``. True when one was written; the autotuner then reads
    and checks it as any record on disk."""
    remote = store()
    if remote is None:
        return False
    data = remote.fetch_record(path.name)
    if data is None or len(data) > RECORD_LIMIT:
        return False
    import json

    try:
        record = json.loads(data)
    except ValueError:
        return False  # not a record: tune again, and the new record replaces it
    if not isinstance(record, dict):
        return False
    record.update(origin="remote", remote={"url": remote.url, "fetched": time.time()})
    try:
        _write_atomic(path, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())
    except OSError:
        return False  # the local tune/ folder is unwritable: tune here (its _save says why)
    return True


def publish_tuning_record(path: Path) -> None:
    """After a tuning record was written to `path`: share it under its name (records fetched from the
    remote are not published back)."""
    remote = store()
    if remote is None:
        return
    try:
        data = path.read_bytes()
    except OSError:
        return
    remote.publish_record(path.name, data)


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.remote.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
