"""The Dockerfiles: what can go stale (the command, the extras, the files), and the real podman build and run
(marked ``docker``: ``make docker-test``, not part of ``make test``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import tomllib
from conftest import REPO
from test_cli import embedkit

DOCKERFILES = [REPO / "docker" / "Dockerfile", REPO / "docker" / "Dockerfile.gpu"]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_default_command_is_a_valid_embedkit_command(dockerfile):
    text = dockerfile.read_text()
    assert re.search(r'^ENTRYPOINT \["embedkit"\]$', text, re.MULTILINE)
    command = json.loads(re.search(r"^CMD (\[.*\])$", text, re.MULTILINE).group(1))
    # Click rejects unknown options before it prints help, so this checks every option of the default command.
    result = embedkit(*command, "--help")
    assert result.returncode == 0, result.stderr
    assert command[0] == "evaluate" and "--dataset" in command


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_installs_existing_extras_and_files(dockerfile):
    text = dockerfile.read_text()
    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    (wanted,) = re.findall(r'pip install "\.\[([a-z,]+)\]"', text)
    assert set(wanted.split(",")) <= extras
    for source in re.findall(r"^COPY (.+) \S+$", text, re.MULTILINE):
        for name in source.split():
            assert (REPO / name).exists(), name
    # torch is pinned before the package, as the Makefile does, so pip never picks another build.
    assert text.index('pip install "torch==${TORCH_VERSION}"') < text.index('pip install ".[')


def test_build_args_keep_the_public_defaults():
    """``make docker-test`` swaps the base and the torch index; a plain ``docker build`` gets the public ones."""
    cpu, gpu = (dockerfile.read_text() for dockerfile in DOCKERFILES)
    assert "ARG BASE=python:3.11-slim-bookworm\nFROM ${BASE}" in cpu
    assert "ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu" in cpu and '--index-url "${TORCH_INDEX}"' in cpu
    assert "ARG BASE=nvidia/cuda:" in gpu and "FROM ${BASE}" in gpu and '--index-url "${TORCH_INDEX}"' in gpu
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {".venv", "runs", ".cache", "**/__pycache__"} <= set(ignored)


def test_committed_podman_files_name_no_host():
    """The build's mirror, CA bundle and wheel folder are read on the machine at run time, never written down."""
    for path in [*(REPO / "docker" / "podman").iterdir(), REPO / "docker" / "check_images.py"]:
        text = path.read_text()
        assert not re.search(r"https?://(?!pypi\.org/simple)[\w.-]+", text.split('"""', 2)[-1]), path.name


@pytest.mark.docker
def test_images_build_run_and_report_the_published_scores():
    """The real thing: podman builds both images (the GPU one after its base), the CPU image evaluates SciFact in a
    container with no network (dense 0.6451, pyserini BM25 0.6789, each +-0.002) and nothing of it is left behind."""
    if shutil.which("podman") is None:  # never a pass without a build
        pytest.fail("podman is not installed: run `make docker-test`, which installs it", pytrace=False)
    if os.geteuid() != 0:
        pytest.fail("the podman check runs as root (debootstrap, rootful podman)", pytrace=False)
    done = subprocess.run([sys.executable, str(REPO / "docker" / "check_images.py")], text=True, capture_output=True)
    print(done.stdout[-6000:], done.stderr[-3000:])
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    summary = json.loads(done.stdout[done.stdout.rindex("\n{") : done.stdout.rindex("}") + 1])
    assert summary["left_behind"] == {}
    assert abs(summary["ndcg_at_10"]["dense"] - 0.6451) <= 0.002
    assert abs(summary["ndcg_at_10"]["bm25"] - 0.6789) <= 0.002
    assert summary["gpu_image"]["size_gb"] > 0
