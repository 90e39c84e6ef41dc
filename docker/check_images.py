"""`make docker-test`: build docker/Dockerfile with podman, run it on SciFact and check its reports; build
docker/Dockerfile.gpu through every step after its base; leave no image, container or network behind.

No Docker engine or image registry is needed: the engine is Debian's podman (installed when missing), the base image
is a debootstrap rootfs from the mirror apt already uses (read from apt's sources, never a fixed host), pip inside
the build trusts this machine's CA bundle and finds torch in the same wheel folder pip uses here. Every name it
makes carries this run's id, and only those are removed at the end.

    python3 docker/check_images.py [--data ../shared/data/beir] [--skip-gpu] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PODMAN_DIR = REPO / "docker" / "podman"
EXPECTED = {"dense": 0.6451, "bm25": 0.6789}  # all-MiniLM-L6-v2 256 tokens; pyserini Lucene BM25 flat (NOTES.md)
TOLERANCE = 0.002
PIP_CONF = "[global]\ncert = /etc/embedkit-build/ca.crt\nfind-links = /etc/embedkit-build/wheels\nretries = 0\n"


def run(*command: str, capture: bool = False, **kwargs) -> str:
    print("+", " ".join(command), flush=True)
    done = subprocess.run(command, check=True, text=True, capture_output=capture, **kwargs)
    return done.stdout if capture else ""


def ensure_engine() -> None:
    """Debian's podman, buildah, runc and debootstrap, installed with apt when any is missing."""
    missing = [tool for tool in ("podman", "buildah", "runc", "debootstrap") if shutil.which(tool) is None]
    if not missing:
        return
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    run(*sudo, "apt-get", "update", "-qq", env=env)
    run(*sudo, "apt-get", "install", "-y", "-qq", "podman", "buildah", "runc", "debootstrap", env=env)


def debian_mirror(suite: str = "bookworm") -> str:
    """The URI apt already fetches ``suite`` from (deb822 ``.sources`` files or one-line ``sources.list``)."""
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in sources:
        if not path.is_file() or not path.name.endswith((".list", ".sources")):
            continue
        text = path.read_text()
        for stanza in re.split(r"\n\s*\n", text):
            fields = dict(re.findall(r"^(\w[\w-]*):\s*(.+)$", stanza, re.MULTILINE))
            if suite in fields.get("Suites", "").split() and "deb" in fields.get("Types", "").split():
                return fields["URIs"].split()[0]
        for line in text.splitlines():
            match = re.match(rf"\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+{suite}\s", line)
            if match:
                return match.group(1)
    sys.exit(f"no apt source for '{suite}' in /etc/apt: debootstrap needs a Debian mirror")


def pip_setting(name: str, environment: str) -> str | None:
    """A pip setting as pip sees it here: the environment first, then ``pip config``."""
    if os.environ.get(environment):
        return os.environ[environment].split()[0]
    done = subprocess.run(
        [sys.executable, "-m", "pip", "config", "get", f"global.{name}"], capture_output=True, text=True
    )
    return done.stdout.strip().split()[0] if done.returncode == 0 and done.stdout.strip() else None


def containers_conf(folder: Path) -> Path:
    """The committed template with this machine's hard nofile and nproc limits filled in."""
    limits = {
        "@NOFILE@": run("bash", "-c", "ulimit -Hn", capture=True).strip(),
        "@NPROC@": "32768",
    }
    text = (PODMAN_DIR / "containers.conf.in").read_text()
    for key, value in limits.items():
        text = text.replace(key, "65536" if value == "unlimited" else value)
    path = folder / "containers.conf"
    path.write_text(text)
    return path


def build_mounts(folder: Path) -> tuple[list[str], dict[str, str]]:
    """``podman build`` volume flags (CA bundle, wheel folder, pip.conf; never committed into an image) and the
    build args that point torch's install at the wheel folder and the ordinary package index."""
    cert = pip_setting("cert", "PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt"
    wheels = pip_setting("find-links", "PIP_FIND_LINKS")
    conf = folder / "pip.conf"
    conf.write_text(PIP_CONF if wheels else PIP_CONF.replace("find-links = /etc/embedkit-build/wheels\n", ""))
    mounts = ["-v", f"{cert}:/etc/embedkit-build/ca.crt:ro", "-v", f"{conf}:/etc/pip.conf:ro"]
    build_args = {}
    if wheels:
        mounts += ["-v", f"{wheels}:/etc/embedkit-build/wheels:ro"]
        build_args["TORCH_INDEX"] = "https://pypi.org/simple"
    return mounts, build_args


def build(
    tag: str, dockerfile: Path, mounts: list[str], build_args: dict[str, str], context: Path = REPO
) -> dict[str, float]:
    """One ``podman build`` without intermediate images (nothing cached is left behind); its time and size."""
    flags = [flag for key, value in build_args.items() for flag in ("--build-arg", f"{key}={value}")]
    start = time.monotonic()
    run(
        "podman",
        "build",
        "--network",
        "host",
        "--layers=false",
        *mounts,
        *flags,
        "-f",
        str(dockerfile),
        "-t",
        tag,
        str(context),
    )
    seconds = time.monotonic() - start
    size = int(run("podman", "image", "inspect", "--format", "{{.Size}}", tag, capture=True).strip())
    return {"build_s": round(seconds, 1), "size_gb": round(size / 1e9, 2)}


def evaluate_in_container(tag: str, data: Path, runs: Path, extra: list[str]) -> float:
    """Run the image (no network; default command, or ``extra`` in its place) and read its report's nDCG@10."""
    runs.mkdir()
    runs.chmod(0o777)  # the image runs as uid 1000
    volumes = ["-v", f"{data.resolve()}:/data:ro", "-v", f"{runs}:/runs"]
    start = time.monotonic()
    run("podman", "run", "--rm", "--network", "none", *volumes, tag, *extra)
    print(f"container ran {time.monotonic() - start:.0f} s")
    (report,) = runs.glob("*/report.json")
    return float(json.loads(report.read_text())["metrics"]["ndcg_at_10"])


def inventory() -> dict[str, set[str]]:
    listing = {
        "images": ["podman", "images", "-a", "--format", "{{.ID}}"],
        "containers": ["podman", "ps", "-a", "--format", "{{.ID}}"],
        "networks": ["podman", "network", "ls", "--format", "{{.Name}}"],
        "volumes": ["podman", "volume", "ls", "--format", "{{.Name}}"],
    }
    return {kind: set(run(*command, capture=True).split()) for kind, command in listing.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "beir", help="BEIR folders")
    parser.add_argument("--skip-gpu", action="store_true", help="do not build docker/Dockerfile.gpu")
    parser.add_argument("--keep", action="store_true", help="leave the images (for a look inside)")
    args = parser.parse_args()
    if not (args.data / "scifact").is_dir():
        sys.exit(f"--data: no scifact folder in {args.data}")
    if os.geteuid() != 0:
        sys.exit("run as root: debootstrap and the rootful podman this check uses need it")
    ensure_engine()
    run_id = f"{os.getpid()}-{int(time.time())}"
    tags = {
        "debian": f"localhost/embedkit-test-debian:{run_id}",
        "python": f"localhost/embedkit-test-python:{run_id}",
        "cpu": f"localhost/embedkit-test-cpu:{run_id}",
        "gpu": f"localhost/embedkit-test-gpu:{run_id}",
    }
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="embedkit-docker-") as tmp:
        folder = Path(tmp)
        os.environ["CONTAINERS_CONF"] = str(containers_conf(folder))
        before = inventory()
        try:
            start = time.monotonic()
            rootfs = folder / "rootfs"
            run("debootstrap", "--variant=minbase", "bookworm", str(rootfs), debian_mirror())
            tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
            run("podman", "import", "-", tags["debian"], stdin=tar.stdout)
            tar.wait()
            shutil.rmtree(rootfs)
            mounts, build_args = build_mounts(folder)
            build(
                tags["python"], PODMAN_DIR / "Containerfile.python-base", mounts, {"DEBIAN": tags["debian"]}, PODMAN_DIR
            )
            results["base_s"] = round(time.monotonic() - start, 1)
            results["cpu_image"] = build(
                tags["cpu"], REPO / "docker" / "Dockerfile", mounts, {**build_args, "BASE": tags["python"]}
            )
            ndcg = {
                "dense": evaluate_in_container(tags["cpu"], args.data, folder / "runs-dense", []),
                "bm25": evaluate_in_container(
                    tags["cpu"],
                    args.data,
                    folder / "runs-bm25",
                    [
                        "evaluate",
                        "--dataset",
                        "scifact",
                        "--retriever",
                        "bm25",
                        "--bm25-backend",
                        "pyserini",
                        "--output",
                        "/runs",
                    ],
                ),
            }
            results["ndcg_at_10"] = ndcg
            if not args.skip_gpu:
                results["gpu_image"] = build(
                    tags["gpu"], REPO / "docker" / "Dockerfile.gpu", mounts, {**build_args, "BASE": tags["debian"]}
                )
        finally:
            if not args.keep:
                present = set(run("podman", "images", "--format", "{{.Repository}}:{{.Tag}}", capture=True).split())
                mine = [tag for tag in tags.values() if tag in present]
                if mine:
                    run("podman", "rmi", "--force", *mine)
        after = inventory()
    left = {kind: sorted(after[kind] - before[kind]) for kind in after if after[kind] - before[kind]}
    results["left_behind"] = left
    print(json.dumps(results, indent=2))
    failures = [
        f"{name} nDCG@10 {value:.4f} is not {EXPECTED[name]} +- {TOLERANCE}"
        for name, value in results.get("ndcg_at_10", {}).items()
        if abs(value - EXPECTED[name]) > TOLERANCE
    ]
    if left and not args.keep:
        failures.append(f"left behind: {left}")
    if failures:
        sys.exit("; ".join(failures))
    print("docker-test passed")


if __name__ == "__main__":
    main()
