"""The README's Python examples run as written (on the default device) and their asserts hold."""
import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_readme_has_examples():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, tmp_path, monkeypatch):
    path = tmp_path / f"readme_example_{index}.py"
    path.write_text(BLOCKS[index])
    code = compile(BLOCKS[index], str(path), "exec")
    exec(code, {"__name__": f"readme_example_{index}"})
