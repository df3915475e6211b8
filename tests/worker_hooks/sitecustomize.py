"""Test hook for tilegcn.autotune's compile workers (tests/test_autotune.py puts this folder on the PYTHONPATH
of the processes it starts, never of the test process itself): $TILEGCN_TEST_LOWER_HOOK makes
`tilegcn.compiler.lower` misbehave, as a real compile sometimes does:
"kill:THREADS": lowering a kernel of THREADS threads kills the process with SIGKILL (as the out-of-memory
killer does); "sleep:DIR": every lowering writes DIR/<pid>, then blocks for a minute (a long compile)."""
import os
import signal
import time
from pathlib import Path

_hook = os.environ.get("TILEGCN_TEST_LOWER_HOOK", "")
if _hook:
    import tilegcn.compiler

    _lower = tilegcn.compiler.lower

    def lower(kernel, *args, **kwargs):
        if _hook.startswith("sleep:"):
            (Path(_hook[len("sleep:"):]) / str(os.getpid())).touch()
            time.sleep(60)
        elif _hook == f"kill:{kernel.block[0]}":
            os.kill(os.getpid(), signal.SIGKILL)
        return _lower(kernel, *args, **kwargs)

    tilegcn.compiler.lower = lower
