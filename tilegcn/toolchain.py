"""Find LLVM (llvm-mc, ld.lld, llvm-objdump) and turn AMDGCN assembly into an HSACO code object.

Search order: $TILEGCN_LLVM_DIR (used alone when set), ROCm ($ROCM_PATH/llvm/bin, /opt/rocm/llvm/bin),
PATH (plain names, then `-NN` suffixed names, newest first), /usr/lib/llvm-*/bin (newest first).
The first set whose llvm-mc has the AMDGPU target and is new enough for the requested arch wins.
"""
from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import subprocess
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

from .amdgcn.arch import get_arch
from .errors import TilegcnError, ToolchainError

INSTALL_HINT = (
    "install LLVM with the AMDGPU target: on Debian/Ubuntu `apt-get update && apt-get install -y "
    "llvm-22 lld-22`; with ROCm, its /opt/rocm/llvm/bin serves; or point TILEGCN_LLVM_DIR at a folder "
    "holding llvm-mc, ld.lld and llvm-objdump"
)
_SUFFIX_VERSIONS = range(30, 13, -1)


@dataclass(frozen=True)
class LLVM:
    mc: str
    lld: str
    objdump: str
    version: str  # e.g. "22.1.8"

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    def tool(self, name: str) -> str | None:
        """Another tool of the same LLVM (`llc`, `llvm-mca`, ...) beside llvm-mc, with its version suffix
        (llvm-mc-22 -> llc-22), or None when that LLVM lacks it. Used by tests and benchmarks as oracles."""
        folder, base = os.path.split(self.mc)
        path = os.path.join(folder, name + base[len("llvm-mc"):])
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


def _candidates():
    """(llvm-mc, ld.lld, llvm-objdump) path triples in search order."""
    env_dir = os.environ.get("TILEGCN_LLVM_DIR")
    if env_dir:
        yield tuple(os.path.join(env_dir, t) for t in ("llvm-mc", "ld.lld", "llvm-objdump"))
        return
    rocm_dirs = [os.path.join(os.environ["ROCM_PATH"], "llvm", "bin")] if "ROCM_PATH" in os.environ else []
    for d in rocm_dirs + ["/opt/rocm/llvm/bin"]:
        yield tuple(os.path.join(d, t) for t in ("llvm-mc", "ld.lld", "llvm-objdump"))
    for suffix in [""] + [f"-{v}" for v in _SUFFIX_VERSIONS]:
        found = [shutil.which(t + suffix) for t in ("llvm-mc", "ld.lld", "llvm-objdump")]
        if all(found):
            yield tuple(found)
    def version_of(path):
        m = re.search(r"llvm-(\d+)", path)
        return int(m.group(1)) if m else 0
    for d in sorted(glob.glob("/usr/lib/llvm-*/bin"), key=version_of, reverse=True):
        yield tuple(os.path.join(d, t) for t in ("llvm-mc", "ld.lld", "llvm-objdump"))


def _probe_memo_path() -> Path:
    from .cache import PROBE_MEMO, cache_dir

    return cache_dir(create=True) / PROBE_MEMO


def _probe_key(mc: str) -> str:
    st = os.stat(mc)
    return f"{os.path.realpath(mc)}:{st.st_size}:{st.st_mtime_ns}"


@functools.lru_cache(maxsize=None)
def _probe(mc: str):
    """(version, has_amdgpu) of one llvm-mc, or None when it does not run.

    Starting llvm-mc costs ~20 ms, most of a cache hit in a new process, so answers are remembered on
    disk keyed by the binary's path, size and mtime (a new LLVM at the same path is probed again). The
    memo is signed with the cache's key (a version in it enters cache keys) and only usable LLVMs are
    remembered, so a bad memo can neither fake a version nor reject an install: it is probed again."""
    try:
        key, memo_path = _probe_key(mc), _probe_memo_path()
    except (OSError, TilegcnError):
        key = memo_path = None
    if memo_path:
        hit = _read_probe_memo(memo_path).get(key)
        if _usable_probe(hit):
            return tuple(hit)
    try:
        out = subprocess.run([mc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = _VERSION.search(out)
    result = (m.group(1) if m else "0.0", "amdgcn" in out)
    if memo_path and _usable_probe(list(result)):
        _remember_probe(memo_path, key, result)
    return result


_VERSION = re.compile(r"LLVM version (\d+\.\d+(?:\.\d+)?)")
_warned_memos: set = set()


def _usable_probe(hit) -> bool:
    """A remembered probe worth trusting: [version, True] with a version llvm-mc could have printed."""
    return (isinstance(hit, list) and len(hit) == 2 and hit[1] is True and isinstance(hit[0], str)
            and _VERSION.fullmatch(f"LLVM version {hit[0]}") is not None)


def _read_probe_memo(memo_path: Path) -> dict:
    """The memo's {probe key: [version, True]}; {} when absent, and with a CacheWarning (once per process)
    when it is unreadable, too large, not tilegcn's or not signed with this cache's key."""
    from .cache import CacheWarning, load_signed

    try:
        memo = load_signed(memo_path)
        if isinstance(memo, dict):
            return memo
        problem = f"it holds a JSON {type(memo).__name__}, not an object"
    except FileNotFoundError:
        return {}
    except (OSError, TilegcnError) as e:
        problem = str(e)
    if str(memo_path) not in _warned_memos:
        _warned_memos.add(str(memo_path))
        warnings.warn(f"tilegcn: the LLVM probe memo {memo_path} is bad ({problem}); probing llvm-mc again and "
                      "rewriting it", CacheWarning, stacklevel=2)
    return {}


def _remember_probe(memo_path: Path, key: str, result):
    from .cache import save_signed

    memo = _read_probe_memo(memo_path)
    memo[key] = list(result)
    try:
        save_signed(memo_path, memo)  # atomic, 0600: readers see the old or the new file
    except (OSError, TilegcnError):
        pass  # only a memo: the next process probes again


@functools.lru_cache(maxsize=None)
def find_llvm(arch: str = "gfx942") -> LLVM:
    """The first LLVM in search order that can assemble for `arch`; ToolchainError naming why not."""
    arch_info = get_arch(arch)
    rejected = []
    for mc, lld, objdump in _candidates():
        if not all(os.path.isfile(p) and os.access(p, os.X_OK) for p in (mc, lld, objdump)):
            continue
        probe = _probe(mc)
        if probe is None:
            rejected.append(f"{mc} (does not run)")
            continue
        version, has_amdgpu = probe
        if not has_amdgpu:
            rejected.append(f"{mc} (LLVM {version}, no AMDGPU target)")
        elif int(version.split(".")[0]) < arch_info.min_llvm_major:
            rejected.append(f"{mc} (LLVM {version}; {arch_info.name} needs LLVM >= {arch_info.min_llvm_major})")
        else:
            return LLVM(mc, lld, objdump, version)
    where = "; rejected: " + ", ".join(rejected) if rejected else ""
    raise ToolchainError(f"tilegcn: no usable LLVM found for {arch_info.name}{where}. To fix, {INSTALL_HINT}")


def _assembler_error(stderr: str, asm: str, arch: str) -> ToolchainError:
    """Quote each offending asm line next to llvm-mc's message."""
    lines = asm.splitlines()
    parts = []
    for m in re.finditer(r"^[^:\n]*:(\d+):(\d+): (error|warning): (.*)$", stderr, re.M):
        lineno = int(m.group(1))
        src = lines[lineno - 1].strip() if 0 < lineno <= len(lines) else "?"
        parts.append(f"  line {lineno}: {m.group(4)}\n    {src}")
    if len(parts) > 8:
        parts = parts[:8] + [f"  ... and {len(parts) - 8} more"]
    detail = "\n".join(parts) if parts else stderr.strip()
    return ToolchainError(f"tilegcn: llvm-mc rejected the generated assembly for {arch}:\n{detail}")


def assemble(asm: str, arch: str) -> bytes:
    """Assemble and link AMDGCN assembly into HSACO bytes (llvm-mc, then ld.lld -shared)."""
    arch = get_arch(arch).name
    llvm = find_llvm(arch)
    with tempfile.TemporaryDirectory(prefix="tilegcn-") as tmp:
        obj, hsaco = os.path.join(tmp, "k.o"), os.path.join(tmp, "k.hsaco")
        mc = subprocess.run(
            [llvm.mc, "-triple=amdgcn-amd-amdhsa", f"-mcpu={arch}", "-filetype=obj", "-o", obj, "-"],
            input=asm, capture_output=True, text=True,
        )
        if mc.returncode != 0 or "error:" in mc.stderr:
            raise _assembler_error(mc.stderr, asm, arch)
        ld = subprocess.run([llvm.lld, "-shared", obj, "-o", hsaco], capture_output=True, text=True)
        if ld.returncode != 0:
            raise ToolchainError(f"tilegcn: ld.lld failed for {arch}:\n{ld.stderr.strip()}")
        with open(hsaco, "rb") as f:
            return f.read()


def disassemble(hsaco, arch: str) -> str:
    """`llvm-objdump -d` text of a code object given as bytes or a path."""
    arch = get_arch(arch).name
    llvm = find_llvm(arch)
    if isinstance(hsaco, (bytes, bytearray)):
        with tempfile.NamedTemporaryFile(suffix=".hsaco") as f:
            f.write(hsaco)
            f.flush()
            return disassemble(f.name, arch)
    out = subprocess.run([llvm.objdump, "-d", f"--mcpu={arch}", str(hsaco)], capture_output=True, text=True)
    if out.returncode != 0:
        raise ToolchainError(f"tilegcn: llvm-objdump failed on {hsaco}: {out.stderr.strip()}")
    return out.stdout
