# The two commands of the README: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: demo tools test test-slow docker-test docs lint bench clean

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# torch first, pinned: a plain `torch` requirement on a fresh venv would pull a multi-GB CUDA build.
$(VENV)/.installed: $(BIN)/activate pyproject.toml
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e .
	touch $@

# One resolve for the dev install (a clean clone's `make test`), not the plain install and then the extras.
$(VENV)/.installed-dev: $(BIN)/activate pyproject.toml
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

# The HTML report test opens report.html in a real headless Chromium and the kill tests inject a real SIGKILL with
# strace (Debian's packages). Installed where root or sudo can; elsewhere one line says so and those tests skip (-rs
# prints each skip and its reason), so a machine without root still runs the rest.
tools:
	@command -v chromium >/dev/null && command -v strace >/dev/null && exit 0; \
	if [ "$$(id -u)" = 0 ]; then SUDO=; elif sudo -n true 2>/dev/null; then SUDO=sudo; \
	else echo "make test: chromium or strace is missing and installing them needs root; their tests skip"; exit 0; fi; \
	$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium strace

demo: $(VENV)/.installed
	$(BIN)/embedkit evaluate --dataset scifact --output runs

# Two pytest workers, one test file each at a time: most of a test's time is a CLI process importing torch and
# sentence-transformers on one core, so a second worker uses the other one. One torch thread per process, so the two
# do not spin against each other (tests/conftest.py orders the files). Then the tests marked two_threads run alone
# with torch's two threads: the multi-thread path every user gets.
test: $(VENV)/.installed-dev tools
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -m "not slow and not docker and not two_threads" -n 2 --dist loadfile --no-loadscope-reorder -rs --durations=15
	OMP_NUM_THREADS=2 $(BIN)/python -m pytest -m "two_threads and not slow and not docker" -rs --durations=5

# pytest's closing line gives the wall time.
test-slow: $(VENV)/.installed-dev tools
	$(BIN)/python -m pytest -m slow --durations=15

# Builds docker/Dockerfile with podman, runs it on SciFact and checks its nDCG@10, builds docker/Dockerfile.gpu after
# its base, and removes every image it made (docker/check_images.py; needs root). podman and its tools come from
# Debian's packages first; where they cannot be installed the target fails with one line, and the test never skips.
docker-test: $(VENV)/.installed-dev /usr/bin/podman
	$(BIN)/python -m pytest -m docker tests/test_docker.py -s

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
/usr/bin/podman:
	@[ "$$(id -u)" = 0 ] || command -v sudo >/dev/null || { echo "make docker-test: podman is missing and installing it needs root or sudo" >&2; exit 2; }
	@{ $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq podman buildah runc debootstrap >/dev/null; } \
		|| { echo "make docker-test: apt-get could not install podman, buildah, runc and debootstrap" >&2; exit 2; }

# The documentation site into site/ (gitignored), offline; --strict turns any warning (a broken link, a missing
# reference, a nav entry without a page) into a failure. tests/test_docs.py runs the same build in `make test`.
docs: $(VENV)/.installed-dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/encode.py

clean:
	rm -rf $(VENV) runs .cache site
