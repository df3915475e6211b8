"""The Python examples of README.md and of every page in docs/ run as written (on the default device) and their
asserts hold, and none of them touches the reader's own cache: each runs with a "user's cache" holding a demo
entry of theirs (the test's cache dir, as $TILEGCN_CACHE_DIR) and a fresh HOME, and that entry must still load
afterwards. Every ```python block runs; a fragment that is not meant to run goes in a ```text or ```pycon block."""
import os
import pathlib
import re

import pytest

from tilegcn.cache import Cache, make_key
from tilegcn.options import CompileOptions

REPO = pathlib.Path(__file__).resolve().parent.parent
README = REPO / "README.md"
PAGES = [README] + sorted((REPO / "docs").rglob("*.md"))


def _python_blocks(page):
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), re.S | re.M)


# (page relative to the repository, index of the block in that page, the code)
EXAMPLES = [(str(page.relative_to(REPO)), i, code) for page in PAGES for i, code in enumerate(_python_blocks(page))]
BLOCKS = [code for _, _, code in EXAMPLES]


def test_readme_has_examples():
    # the quick start and the compiled-kernel look in README.md; the pages moved out of it keep theirs
    assert len(_python_blocks(README)) >= 2
    assert len(BLOCKS) >= 20


def _plant_users_entry(root):
    def build(tmp):
        for name in ("kernel.ir", "kernel.s", "kernel.hsaco"):
            (tmp / name).write_text(f"the reader's own {name}\n")
        return {"name": "demo"}

    key = make_key("the reader's demo kernel", CompileOptions("gfx950"), "22")
    Cache(root).get_or_build(key, build)
    return key


@pytest.mark.parametrize("index", range(len(BLOCKS)), ids=[f"{page}:{i}" for page, i, _ in EXAMPLES])
def test_readme_example_runs(index, tmp_path, monkeypatch, cache_dir):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    # A page's example runs as a reader in the checkout would (it may open tests/corpus/..., examples/...), but
    # in a folder of its own, so what it writes (an export folder ...) stays out of the checkout
    for name in ("tests", "examples"):
        (tmp_path / name).symlink_to(REPO / name)
    monkeypatch.chdir(tmp_path)
    users_key = _plant_users_entry(cache_dir)
    path = tmp_path / f"readme_example_{index}.py"
    path.write_text(BLOCKS[index])
    code = compile(BLOCKS[index], str(path), "exec")
    environ = dict(os.environ)  # a page may set variables (docs/remote-cache.md): they must not outlive it
    try:
        exec(code, {"__name__": f"readme_example_{index}"})
    finally:
        os.environ.clear()
        os.environ.update(environ)
    assert Cache(cache_dir, create=False).load(users_key) is not None, "the example removed the reader's entry"
    assert not (home / ".tilegcn").exists(), "the example wrote to the default cache under HOME"
