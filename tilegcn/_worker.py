"""tilegcn.autotune's compile workers: the pool (in the tuning process) and the worker's loop.

Why not multiprocessing: its "spawn" and "forkserver" start methods prepare each worker by re-running the
parent's `__main__` (the user's script), so a script, notebook or `python -c` without an
`if __name__ == "__main__":` guard re-ran the tuned call itself in every worker, which then died. A worker here
is a fresh `python -c` that puts the parent's sys.path in place and imports this module: nothing of the user's
runs in it. The parent traces each config (it has the user's function) and sends the traced tile IR, which is
made of tilegcn's own objects; the worker lowers and assembles it into the shared disk cache (whose per-key
locks make concurrent builds safe), exactly as `JITFunction._build` would (`jit.build_traced`).

Protocol: each message is an 8-byte big-endian length and a pickle. A worker says "ready" once its imports are
done, then answers each job read from stdin with one reply on stdout: None (built, or already in the cache),
("compile", text) (the config's own failure) or ("load", text) (the job cannot be unpickled here: the parent
compiles that config itself). The pool adds ("died", text) for the job a worker was running when it died.

A worker exits at EOF on stdin, and within a tenth of a second of its parent's death (a thread watching
os.getppid()), so a parent killed with SIGKILL leaves no worker behind, nor a worker holding the pipes it
inherited (a caller reading the parent's output would otherwise wait for them forever).
"""
from __future__ import annotations

import json
import os
import pickle
import selectors
import signal
import struct
import subprocess
import sys
import threading
import time

_HEADER = struct.Struct(">Q")
_READY = "ready"
_PARENT_POLL_S = 0.1
_CLOSE_WAIT_S = 5.0
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the folder holding tilegcn/

# A worker: put the parent's sys.path in place (the same tilegcn and torch as the parent), then run main().
_BOOT = "import json, sys; sys.path[:] = json.loads(sys.argv[2]); from tilegcn._worker import main; main()"


def error_text(e: BaseException) -> str:
    """"ErrorClass: message" (a tilegcn error's message without its location prefix)."""
    return f"{type(e).__name__}: {getattr(e, 'raw_message', None) or e}"


# -- the worker ---------------------------------------------------------------------------------------------------
def main() -> None:
    parent = int(sys.argv[1])
    _exit_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the parent cleans up
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # a stray print (a warning, a library) goes to stderr, never into the replies
    sys.stdout = sys.stderr
    jobs = sys.stdin.buffer
    from . import compiler  # noqa: F401  the compile pipeline: imported before "ready", not in a job's time
    from .jit import build_traced

    _send(replies, _READY)
    while (blob := _read_message(jobs)) is not None:
        _send(replies, _compile(build_traced, blob))


def _exit_with_parent(parent: int) -> None:
    def watch():
        while os.getppid() == parent:
            time.sleep(_PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="tilegcn-worker-parent-watch", daemon=True).start()


def _compile(build_traced, blob: bytes):
    try:
        kernel, options, described = pickle.loads(blob)
    except Exception as e:  # noqa: BLE001 - e.g. an object of the user's in the IR: the parent compiles it
        return "load", error_text(e)
    try:
        build_traced(kernel, options, described)
    except Exception as e:  # noqa: BLE001 - any failure is the config's, reported in the sweep's table
        return "compile", error_text(e)
    return None


def _send(stream, message) -> None:
    blob = pickle.dumps(message)
    stream.write(_HEADER.pack(len(blob)) + blob)


def _read_message(stream):
    """The next message's bytes, or None at EOF."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    blob = stream.read(size)
    return blob if len(blob) == size else None


# -- the pool -----------------------------------------------------------------------------------------------------
class _Worker:
    def __init__(self):
        path = [_PACKAGE_ROOT] + sys.path  # this very tilegcn first, even if the cwd changed since it was imported
        self.proc = subprocess.Popen([sys.executable, "-c", _BOOT, str(os.getpid()), json.dumps(path)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True)
        self.inbox = bytearray()
        self.ready = False
        self.job = None  # the index of the job it is running

    def fileno(self) -> int:
        return self.proc.stdout.fileno()

    def messages(self, chunk: bytes) -> list:
        """The whole messages received so far, unpickled."""
        self.inbox += chunk
        out = []
        while len(self.inbox) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self.inbox)
            if len(self.inbox) < _HEADER.size + size:
                break
            out.append(pickle.loads(bytes(self.inbox[_HEADER.size:_HEADER.size + size])))
            del self.inbox[:_HEADER.size + size]
        return out

    def give(self, index: int, blob: bytes) -> bool:
        """Send a job; False when the worker is gone."""
        try:
            self.proc.stdin.write(_HEADER.pack(len(blob)) + blob)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return False
        self.job = index
        return True

    def death(self) -> str:
        code = self.proc.wait()
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"was killed by {name}" + (" (out of memory?)" if code == -signal.SIGKILL else "")
        return f"exited with status {code}"

    def close(self, wait: float) -> None:
        try:
            self.proc.stdin.close()  # EOF: an idle worker exits
        except OSError:
            pass
        try:
            self.proc.wait(wait)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


def run_jobs(jobs: list, workers: int):
    """Run `jobs` (pickled (kernel, arch, options, described) tuples) on up to `workers` worker processes;
    yields (index, reply) as they finish, in any order. A worker that dies fails the job it was running
    ("died", how) and a fresh one takes over the rest; when no worker can start, the remaining jobs get
    ("load", why) (the caller compiles them itself)."""
    pending = list(range(len(jobs)))[::-1]  # popped from the end: in order
    pool, started = [], 0
    no_start = "no compile worker could be started"
    budget = len(jobs) + 2 * workers  # worker starts allowed: each death that fails no job uses one up
    selector = selectors.DefaultSelector()
    clean = False
    try:
        while pending or any(w.job is not None for w in pool):
            while pending and len(pool) < workers and started < budget:
                started += 1
                try:
                    worker = _Worker()
                except OSError as e:  # e.g. no usable sys.executable (an embedded interpreter)
                    budget, no_start = started, f"no compile worker could be started ({e})"
                    break
                pool.append(worker)
                selector.register(worker, selectors.EVENT_READ)
            if not pool:  # nothing runs and no worker may start: the caller compiles the rest
                while pending:
                    yield pending.pop(), ("load", no_start)
                break
            for worker in pool:
                if worker.ready and worker.job is None and pending:
                    index = pending.pop()
                    if not worker.give(index, jobs[index]):
                        pending.append(index)  # it died idle: its EOF is handled below, the job goes elsewhere
            for key, _ in selector.select():
                worker = key.fileobj
                chunk = os.read(worker.fileno(), 1 << 16)
                if chunk:
                    for message in worker.messages(chunk):
                        if message == _READY:
                            worker.ready = True
                        else:
                            index, worker.job = worker.job, None
                            yield index, message
                    continue
                selector.unregister(worker)
                pool.remove(worker)
                how = worker.death()
                worker.close(0)
                if worker.job is not None:
                    yield worker.job, ("died", f"its compile worker (pid {worker.proc.pid}) {how} while "
                                               "compiling it")
                elif not worker.ready:  # it could not even start: start no more
                    budget, no_start = started, f"a compile worker {how} while starting"
        clean = True
    finally:
        selector.close()
        for worker in pool:  # a worker still starting holds no job: stop it rather than wait for its imports
            worker.close(_CLOSE_WAIT_S if clean and worker.ready else 0)
