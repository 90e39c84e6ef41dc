"""Installed size of embedkit's core and of each extra, each measured in a throw-away virtual environment.

    python benchmarks/install_size.py                          # the core and every extra but dev and gpu
    python benchmarks/install_size.py --targets core,onnx      # some of them
    python benchmarks/install_size.py --targets core --output /tmp/install_size.json   # a dry run

For each target a fresh venv (``python -m venv``) in a temporary folder gets pip upgraded, then ``torch==2.13.0``
(the Makefile's pin, so that pip never resolves a CUDA build), then ``pip install .``. For an extra the distributions
present are recorded, ``pip install '.[extra]'`` runs, and the difference is what the extra adds. A distribution's
size is the sum of the files its RECORD lists, as they lie on disk (bytecode compiled at install included);
``site_packages_mb`` is every file under site-packages. The extras are read from ``pyproject.toml``.

The core must not install openvino, onnx, onnxscript or onnxruntime (issue 38): the script records the check and
exits with status 1 when it fails. ``gpu`` is not installed (faiss-gpu-cu12 brings the CUDA runtime wheels): in the
core's venv, pip's dry-run report lists what it would add. The package is built from a copy of the working tree, so
nothing is written into the checkout. The venvs are deleted afterwards.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
TORCH_PIN = "torch==2.13.0"
CORE_FORBIDDEN = ("openvino", "onnx", "onnxscript", "onnxruntime")
SKIPPED_BY_DEFAULT = ("dev", "gpu")
MB = 1e6


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def run(command: list[str], cwd: Path) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-3000:]
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{tail}")
    return done.stdout


def copy_source(destination: Path) -> Path:
    """What a wheel of embedkit is built from, copied so that the build writes nothing into the checkout."""
    source = destination / "embedkit-src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "setup.cfg", *(p.name for p in ROOT.glob("LICEN[CS]E*"))):
        if (ROOT / name).is_file():
            shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "embedkit", source / "embedkit", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return source


def snapshot(site: Path) -> dict[str, dict]:
    """Every distribution in ``site``: its version and the bytes of the files its RECORD lists."""
    dists = {}
    for dist in importlib.metadata.distributions(path=[str(site)]):
        seen, size = set(), 0
        for file in dist.files or []:
            path = os.path.normpath(dist.locate_file(file))
            if path not in seen and os.path.lexists(path):
                seen.add(path)
                size += os.lstat(path).st_size
        dists[canonical(dist.metadata["Name"])] = {"version": dist.version, "bytes": size}
    return dists


def tree_bytes(folder: Path) -> int:
    return sum(os.lstat(Path(top) / name).st_size for top, _, names in os.walk(folder) for name in names)


def mb(size: int) -> float:
    return round(size / MB, 1)


def listing(dists: dict[str, dict], names) -> dict[str, dict]:
    """Name -> version and MB, largest first."""
    rows = sorted(names, key=lambda name: -dists[name]["bytes"])
    return {name: {"version": dists[name]["version"], "mb": mb(dists[name]["bytes"])} for name in rows}


class Venv:
    def __init__(self, folder: Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
        self.folder = folder
        self.python = str(folder / "bin" / "python")
        run([self.python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], folder)
        self.site = Path(
            run([self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], folder).strip()
        )

    def install(self, *requirements: str) -> None:
        run([self.python, "-m", "pip", "install", "--quiet", *requirements], self.folder)

    def pip_version(self) -> str:
        return run([self.python, "-m", "pip", "--version"], self.folder).split()[1]


def measure(target: str, source: Path, work: Path) -> dict:
    """Install torch, the core and (for an extra) the extra in a fresh venv; what each step added."""
    venv = Venv(work / f"venv-{target}")
    bare = snapshot(venv.site)
    venv.install(TORCH_PIN)
    with_torch = snapshot(venv.site)
    venv.install(str(source))
    core = snapshot(venv.site)
    result = {"pip": venv.pip_version()}
    if target == "core":
        forbidden = sorted(name for name in core if name in CORE_FORBIDDEN or name.startswith(("openvino", "onnx")))
        added = set(core) - set(with_torch)
        result |= {
            "requirement": ".",
            "site_packages_mb": mb(tree_bytes(venv.site)),
            "torch": listing(with_torch, set(with_torch) - set(bare)),
            "torch_mb": mb(sum(with_torch[name]["bytes"] for name in set(with_torch) - set(bare))),
            "added_over_torch": listing(core, added),
            "added_over_torch_mb": mb(sum(core[name]["bytes"] for name in added)),
            "openvino_or_onnx_in_core": forbidden,
        }
        try:
            result["gpu_dry_run"] = gpu_dry_run(venv, source, work)
        except RuntimeError as error:
            result["gpu_dry_run"] = {"failed": str(error)[-500:]}
        return result
    venv.install(f"{source}[{target}]")
    extra = snapshot(venv.site)
    added = set(extra) - set(core)
    changed = {name for name in set(extra) & set(core) if extra[name]["version"] != core[name]["version"]}
    removed = set(core) - set(extra)
    delta = sum(extra[name]["bytes"] for name in added | changed) - sum(
        core[name]["bytes"] for name in changed | removed
    )
    result |= {
        "requirement": f".[{target}]",
        "site_packages_mb": mb(tree_bytes(venv.site)),
        "added_over_core": listing(extra, added),
        "version_changed": {
            name: {"core": core[name]["version"], "with_extra": extra[name]["version"]} for name in sorted(changed)
        },
        "removed": sorted(removed),
        "added_over_core_mb": mb(delta),
    }
    return result


def gpu_dry_run(venv: Venv, source: Path, work: Path) -> dict:
    """What ``.[gpu]`` would add to the core in ``venv``, from pip's dry-run report (nothing is installed)."""
    report = work / "gpu-report.json"
    venv.install("--dry-run", "--report", str(report), f"{source}[gpu]")
    core = snapshot(venv.site)
    wanted = {
        canonical(item["metadata"]["name"]): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    return {
        "requirement": ".[gpu]",
        "measured": False,
        "why": "not installed: faiss-gpu-cu12 brings the CUDA runtime wheels; pip's dry-run report of what it adds",
        "would_add": {name: version for name, version in sorted(wanted.items()) if name not in core},
        "would_change": {
            name: {"core": core[name]["version"], "with_extra": version}
            for name, version in sorted(wanted.items())
            if name in core and name != "embedkit" and core[name]["version"] != version
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--targets",
        help="core and extra names, comma-separated (default: core and every extra "
        "but dev and gpu; core also lists what gpu would add)",
    )
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "install_size.json")
    args = parser.parse_args()

    extras = list(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    default = ["core", *(name for name in extras if name not in SKIPPED_BY_DEFAULT)]
    targets = args.targets.split(",") if args.targets else default
    unknown = [name for name in targets if name != "core" and (name not in extras or name == "gpu")]
    if unknown:
        choices = ", ".join(name for name in extras if name != "gpu")
        parser.error(f"unknown target {', '.join(unknown)} (core or one of {choices}; gpu comes with core)")

    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python", "benchmarks/install_size.py", *sys.argv[1:]]),
        "git_commit": run(["git", "rev-parse", "HEAD"], ROOT).strip(),
        "pyproject_uncommitted_changes": bool(run(["git", "status", "--porcelain", "pyproject.toml"], ROOT).strip()),
        "pyproject_sha256": hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch_pin": TORCH_PIN,
        "unit": "MB = 10^6 bytes of installed files",
        "extras_in_pyproject": extras,
        "targets": {},
        "not_measured": {
            name: "dev: the other extras and the test tools" if name == "dev" else "not in this run's --targets"
            for name in extras
            if name not in targets and name != "gpu"
        },
    }
    with tempfile.TemporaryDirectory(prefix="embedkit-install-size-") as tmp:
        work = Path(tmp)
        source = copy_source(work)
        for target in targets:
            print(f"{target} ...", flush=True)
            result["targets"][target] = measure(target, source, work)
            shutil.rmtree(work / f"venv-{target}")
            print(json.dumps({target: result["targets"][target]}, indent=2), flush=True)
    if "gpu" in extras:
        core = result["targets"].get("core", {})
        result["not_measured"]["gpu"] = core.pop("gpu_dry_run", "not installed: faiss-gpu-cu12 brings the CUDA wheels")
    pips = {entry.pop("pip") for entry in result["targets"].values()}
    result["pip"] = ", ".join(sorted(pips))
    if "core" in result["targets"]:
        found = result["targets"]["core"]["openvino_or_onnx_in_core"]
        result["core_without_openvino_onnx"] = not found
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {args.output}")
    if result.get("core_without_openvino_onnx") is False:
        sys.exit(f"the core installs {', '.join(found)}")


if __name__ == "__main__":
    main()
