# tilegcn: install, test, demo, bench. Works unattended (CI=true, no stdin).
PYTHON ?= python3
PIP := $(PYTHON) -m pip
LLVM_CHECK := from tilegcn.toolchain import find_llvm; find_llvm('gfx950')
LLVM_HOWTO := install LLVM 22 with the AMDGPU target and lld: as root on Debian/Ubuntu \
  'apt-get update && apt-get install -y llvm-22 lld-22' (add the apt.llvm.org repository if your release \
  lacks llvm-22), or use ROCm's /opt/rocm/llvm/bin, or set TILEGCN_LLVM_DIR to a folder with llvm-mc, ld.lld and llvm-objdump

.PHONY: install test test-quick demo bench

# Install once: test/demo/bench depend on `install`, which is up to date while the stamp of this interpreter
# (one per sys.prefix: a new venv installs again) is newer than pyproject.toml; `make install` always installs.
STAMP := .make/installed-$(shell $(PYTHON) -c 'import hashlib, sys; print(hashlib.sha256(sys.prefix.encode()).hexdigest()[:12])' 2>/dev/null)
ifneq ($(filter install,$(MAKECMDGOALS)),)
.PHONY: $(STAMP)
endif
install: $(STAMP)

$(STAMP): pyproject.toml
	@# torch: only when it is missing, and only this exact version (any other spec pulls gigabytes)
	@$(PYTHON) -c "import torch" 2>/dev/null || $(PIP) install torch==2.13.0
	$(PIP) install -e '.[test]'
	@if $(PYTHON) -c "$(LLVM_CHECK)" >/dev/null 2>&1; then \
	  echo "LLVM: $$($(PYTHON) -c "from tilegcn.toolchain import find_llvm; l = find_llvm('gfx950'); print(l.version, l.mc)")"; \
	else \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; \
	  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; \
	  else SUDO=none; fi; \
	  if [ "$$SUDO" != none ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "No usable LLVM found: installing llvm-22 and lld-22 with apt-get"; \
	    $$SUDO apt-get update && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y llvm-22 lld-22 </dev/null \
	      && $(PYTHON) -c "$(LLVM_CHECK)" || { echo "error: apt-get could not provide a usable LLVM; $(LLVM_HOWTO)" >&2; exit 1; }; \
	  else \
	    $(PYTHON) -c "$(LLVM_CHECK)" 2>&1 | tail -n 1 >&2; \
	    echo "error: no usable LLVM and apt-get is not usable here (needs root or passwordless sudo); $(LLVM_HOWTO)" >&2; \
	    exit 1; \
	  fi; \
	fi
	@mkdir -p $(@D) && touch $@

	@# redis-server: the remote-cache tests (tests/test_remote_cache.py) start one; only when it is missing
	@command -v redis-server >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; elif sudo -n true 2>/dev/null; then SUDO="sudo -n"; else SUDO=none; fi; \
	  if [ "$$SUDO" != none ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "No redis-server found: installing it with apt-get"; \
	    $$SUDO apt-get update && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server </dev/null; \
	  else echo "warning: no redis-server and apt-get is not usable here: the remote-cache tests are skipped" \
	    "(CI fails them); install Debian's redis-server package" >&2; fi; }

# pytest's exit status fails the target, 5 (no tests collected) included: make stops on any non-zero status
test: install
	$(PYTHON) -m pytest -q

# the quick subset: everything but the tests marked slow (docs/contributing.md)
test-quick: install
	$(PYTHON) -m pytest -q -m "not slow"

demo: install
	$(PYTHON) examples/gemm/gemm.py --check

bench: install
	@set -e; for script in bench/*.py; do echo "== $$script"; $(PYTHON) $$script; done
