"""The docs site builds with no warning (`mkdocs build --strict`: a broken link or anchor, a page missing from the
nav, a docstring reference that does not resolve are all errors); every public `T.*` and `tilegcn.*` name has a
docstring (the API reference is generated from them) with an example; every `TILEGCN_*` variable the code reads is
in docs/environment.md; every note the code cites lives in docs/, none outside the repository."""
import importlib
import inspect
import os
import pathlib
import re
import subprocess
import sys

import pytest

import tilegcn
from tilegcn import language as T
from tilegcn.ir.types import DType

REPO = pathlib.Path(__file__).resolve().parent.parent
SOURCES = [*sorted((REPO / "tilegcn").rglob("*.py")), *sorted((REPO / "bench").rglob("*.py")),
           *sorted((REPO / "tests").rglob("*.py")), *sorted((REPO / "examples").rglob("*.py")), REPO / "Makefile",
           REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def test_docs_build_strict(tmp_path):
    # CI installs the 'test' extra (make test): there a missing docs tool fails instead of skipping
    for module in ("mkdocs", "mkdocstrings_handlers.python"):
        if os.environ.get("CI") == "true":
            importlib.import_module(module)
        else:
            pytest.importorskip(module, reason="the docs tools are in the 'test' extra: pip install -e '.[test]'")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO / "mkdocs.yml"),
                           "-d", str(tmp_path / "site")], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    reference = (tmp_path / "site" / "reference" / "index.html").read_text()
    assert "T.Kernel(T.ceildiv(N, 128), T.ceildiv(M, 128), threads=256)" in reference  # a docstring's example


def _public(module, skip):
    return [(f"{module.__name__}.{name}", getattr(module, name)) for name in module.__all__ if name not in skip]


# dtype values (T.float is TileLang's name of float32), documented on the language page
LANGUAGE = _public(T, skip={name for name in T.__all__ if isinstance(getattr(T, name), DType)})
API = _public(tilegcn, skip={"__version__", "language", "errors"})  # the two modules are documented as pages
ERRORS = {name for name, obj in API if inspect.isclass(obj) and issubclass(obj, (Exception, Warning))}


@pytest.mark.parametrize("name,obj", LANGUAGE + API, ids=[name for name, _ in LANGUAGE + API])
def test_public_name_has_a_docstring_with_an_example(name, obj):
    doc = inspect.getdoc(obj) or ""
    assert doc.strip(), f"{name} has no docstring (the API reference in docs/reference.md is built from it)"
    if name not in ERRORS:  # the error classes are shown by the pages on errors, not one example each
        assert re.search(r"Example\b.*?```python\n.+?```", doc, re.S), f"{name}'s docstring has no ```python example"


def test_every_environment_variable_is_documented():
    code = "\n".join(p.read_text() for p in (REPO / "tilegcn").rglob("*.py"))
    names = set(re.findall(r"\bTILEGCN_[A-Z0-9_]*[A-Z0-9]\b", code))
    table = (REPO / "docs" / "environment.md").read_text()
    assert len(names) >= 9
    missing = sorted(n for n in names if f"`{n}`" not in table)
    assert not missing, f"TILEGCN_* variables not in docs/environment.md: {missing}"


# the notes the code used to cite outside the repository: ../shared/..., ISA_NOTES, "timing.md 5.1"
OUTSIDE_NOTE = r"\.\./shared\S*|ISA_NOTES\S*|(?<![\w/-])timing\.md (?:\d|section|C\d)\S*"


def test_cited_notes_live_in_docs():
    outside, missing = [], []
    for path in SOURCES:
        if path == pathlib.Path(__file__).resolve():
            continue
        text = path.read_text()
        where = path.relative_to(REPO)
        outside += [f"{where}: {m}" for m in re.findall(OUTSIDE_NOTE, text)]
        if where.parts[0] == "docs":  # their links are checked by the strict build; they cite other repos' docs/
            continue
        missing += [f"{where}: {m}" for m in re.findall(r"\bdocs/[\w./-]+\.md\b", text) if not (REPO / m).is_file()]
    assert not outside, "notes cited outside the repository (move what they say into docs/):\n" + "\n".join(outside)
    assert not missing, "cited docs pages that do not exist:\n" + "\n".join(missing)


def test_readme_links_resolve():
    """README.md is read on GitHub, outside the docs build: each of its local links must name a file or folder."""
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", (REPO / "README.md").read_text())
    local = [link for link in links if "://" not in link]
    assert len(local) >= 20
    broken = [link for link in local if not (REPO / link).exists()]
    assert not broken, f"README.md links to missing files: {broken}"
