"""Build the wheel and the sdist, check them, and run the installed wheel from a clean venv.

Run from a checkout with the test extras installed (``build`` and ``twine`` come with them):
``.venv/bin/python .ci/check_packaging.py``. Every check that fails is printed, and the exit
status is 1 if any did. What is checked:

* ``python -m build`` makes both (the wheel is built from the sdist, so the sdist builds);
* ``twine check --strict`` accepts their metadata (the README renders as the long description);
* the wheel holds every package and subpackage of the source tree with its ``py.typed``, the
  ``coder-agent`` script, the pytest plugin entry point and the ``otel`` instrumenter entry
  point, and nothing from ``tests/``;
* the sdist holds every tracked file its tests need: ``tests/`` (the conformance corpus under
  ``tests/conformance/cases`` among them), ``docs/``, ``examples/``, ``fuzz/`` (with
  ``fuzz/corpus``), ``pyproject.toml``, ``README.md`` and ``LICENSE``;
* in a new virtual environment, outside the checkout, the wheel installs; the core, the shared
  layer, the asyncio and blocking adapters and the integrations package import from it (not
  from the checkout) without extras, ``coder-agent demo`` completes against the built-in fake server, and with the
  ``trio`` extra added the trio adapter imports too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "coder_proto",
    "coder_io_common",
    "coder_io_asyncio",
    "coder_io_trio",
    "coder_io_sync",
    "coder_integrations",
)
# What the sdist's tests read: everything tracked under these, plus these single files.
SDIST_TREES = ("tests", "docs", "examples", "fuzz")
SDIST_FILES = ("pyproject.toml", "README.md", "LICENSE", ".ci/unasync.py")
# Must each hold at least one file (a corpus silently left out would shrink the tests).
SDIST_NONEMPTY = ("tests/conformance/cases", "fuzz/corpus", "docs", "examples")

failures: list[str] = []


def check(ok: bool, what: str) -> None:
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        failures.append(what)


def run(*argv: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    print("$ " + " ".join(str(a) for a in argv), flush=True)
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )
    if done.returncode != 0:
        sys.stdout.write(done.stdout + done.stderr)
        raise SystemExit(f"command failed with status {done.returncode}: {argv[0]} ...")
    return done.stdout


def tracked(*paths: str) -> set[str]:
    out = run("git", "-C", ROOT, "ls-files", "-z", "--", *paths)
    return {p for p in out.split("\0") if p}


def source_packages() -> set[str]:
    """Every package directory (one with an ``__init__.py``) tracked under the six packages."""
    return {str(Path(p).parent) for p in tracked(*PACKAGES) if p.endswith("/__init__.py")}


def check_wheel(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        dist_info = next(n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info"))
        entry_points = zf.read(f"{dist_info}/entry_points.txt").decode()
    for package in sorted(source_packages()):
        check(f"{package}/__init__.py" in names, f"wheel holds package {package}")
    for package in PACKAGES:
        check(f"{package}/py.typed" in names, f"wheel holds {package}/py.typed")
    missing = {p for p in tracked(*PACKAGES) if p.endswith(".py") and p not in names}
    check(not missing, f"wheel holds every tracked module (missing: {sorted(missing)})")
    check(not any(n.startswith("tests/") for n in names), "wheel holds nothing from tests/")
    check("coder-agent = coder_integrations.cli:main" in entry_points, "wheel declares coder-agent")
    check(
        "coder_agents = coder_integrations.pytest_plugin" in entry_points,
        "wheel declares the pytest plugin entry point",
    )
    check(
        "[coder_agents.instrumentation]\notel = coder_integrations.otel:instrument" in entry_points,
        "wheel declares the OpenTelemetry instrumenter the adapters' instrument loads",
    )


def check_sdist(sdist: Path) -> None:
    with tarfile.open(sdist) as tf:
        members = {m.name.split("/", 1)[1] for m in tf.getmembers() if m.isfile() and "/" in m.name}
    wanted = tracked(*SDIST_TREES) | set(SDIST_FILES) | tracked(*PACKAGES)
    missing = sorted(wanted - members)
    check(not missing, f"sdist holds every tracked file its tests need (missing: {missing[:20]})")
    for tree in SDIST_NONEMPTY:
        count = sum(1 for m in members if m.startswith(tree + "/"))
        check(count > 0, f"sdist holds {tree}/ ({count} files)")


def check_installed(wheel: Path, work: Path) -> None:
    env_dir = work / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel)
    # A clean environment and a working directory outside the checkout: what runs is the wheel.
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "CODER_URL"}}
    env["PYTHONSAFEPATH"] = "1"
    # Without extras: the core, the shared I/O layer, the asyncio and blocking adapters and the
    # integrations package (whose modules import their own extras only when used).
    where = run(
        python,
        "-c",
        "import coder_proto, coder_io_common, coder_io_asyncio, coder_io_sync, coder_integrations;"
        "print(coder_proto.__file__)",
        cwd=work,
        env=env,
    ).strip()
    check(
        Path(where).is_relative_to(env_dir) and not Path(where).is_relative_to(ROOT),
        f"the packages import from the installed wheel ({where})",
    )
    out = run(env_dir / "bin" / "coder-agent", "demo", cwd=work, env=env)
    check("--- summary ---" in out, "coder-agent demo completes from the installed wheel")
    check("redials     1" in out, "the demo healed its injected stream drop")
    # The trio adapter with its extra.
    run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", f"{wheel}[trio]")
    run(python, "-c", "import coder_io_trio", cwd=work, env=env)
    check(True, "coder_io_trio imports with the trio extra installed")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="coder-agents-packaging-") as tmp:
        work = Path(tmp)
        dist = work / "dist"
        run(sys.executable, "-m", "build", "--outdir", dist, ROOT)
        (wheel,) = dist.glob("*.whl")
        (sdist,) = dist.glob("*.tar.gz")
        print(f"built {wheel.name} and {sdist.name}")
        run(sys.executable, "-m", "twine", "check", "--strict", wheel, sdist)
        check(True, "twine check --strict accepts the wheel and the sdist")
        check_wheel(wheel)
        check_sdist(sdist)
        check_installed(wheel, work)
    if failures:
        print(f"\n{len(failures)} packaging check(s) failed:", *failures, sep="\n  ")
        return 1
    print("\npackaging checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
