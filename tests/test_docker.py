"""The Dockerfiles can't be built here (no docker); check what can go stale: the command, the extras, the files."""

from __future__ import annotations

import json
import re

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
