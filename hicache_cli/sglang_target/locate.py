"""Find SGLang's HiCache source: installed, a path, or a release wheel fetched into a cache."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from hicache_cli.errors import UsageError

# The classes hicache can drive and the module each lives in, relative to the package root.
CLASS_FILES = {
    "HiRadixCache": "sglang/srt/mem_cache/hiradix_cache.py",
    "UnifiedRadixCache": "sglang/srt/mem_cache/unified_radix_cache.py",
}
TAGS_FILE = "sglang/srt/distributed/communication_tags.py"  # P2PTag, from 0.5.16; imports only enum
# Generated at build time (setuptools-scm), so in wheels and installs but not in a git
# checkout; sglang/version.py only holds a fallback literal ("0.0.0.dev0"), never read.
VERSION_FILE = "sglang/_version.py"
WANTED_FILES = (*CLASS_FILES.values(), TAGS_FILE, VERSION_FILE)
UNPACKED_MARK = ".complete"  # holds the wheel's name and the list of files wanted when it was unpacked


class TargetError(UsageError):
    """The SGLang named by --target cannot be found or fetched."""


@dataclass(frozen=True)
class TargetSpec:
    """What `--target sglang[...]` names: the installed distribution, a release, or a path."""

    kind: str  # installed | version | path
    value: str = ""

    def __str__(self) -> str:
        return {"installed": "sglang", "version": f"sglang=={self.value}", "path": f"sglang:{self.value}"}[self.kind]


def parse_target(text: str) -> TargetSpec | None:
    """`model` (our own cache model) -> None; `sglang`, `sglang==0.5.14`, `sglang:PATH`."""
    text = text.strip()
    if text == "model":
        return None
    if text == "sglang":
        return TargetSpec("installed")
    if text.startswith("sglang=="):
        version = text[len("sglang==") :]
        if not re.fullmatch(r"\d+(\.\d+)*([a-z]+\d*)?(\.post\d+)?", version):
            raise UsageError(f"--target: {version!r} is not a release version (e.g. sglang==0.5.14)")
        return TargetSpec("version", version)
    if text.startswith("sglang:") and len(text) > len("sglang:"):
        return TargetSpec("path", text[len("sglang:") :])
    raise UsageError(f"--target: {text!r}; use model, sglang (installed), sglang==VERSION (a release) or sglang:PATH")


@dataclass(frozen=True)
class SGLangSource:
    """Where one SGLang's files are. `files` maps class names to the module that should hold it."""

    version: str
    origin: str  # installed | wheel | path
    location: str  # what the user would recognise: site-packages, the wheel, the checkout
    files: dict[str, Path]
    tags_file: Path | None


def cache_dir() -> Path:
    """Where downloaded wheels and their extracted files are kept between runs."""
    if "HICACHE_CACHE_DIR" in os.environ:
        return Path(os.environ["HICACHE_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hicache"


def locate(spec: TargetSpec, progress=None) -> SGLangSource:  # noqa: ANN001 - a callable(str) or None
    if spec.kind == "installed":
        return _installed()
    if spec.kind == "version":
        return release(spec.value, progress)
    return _from_path(Path(spec.value).expanduser())


def _installed() -> SGLangSource:
    try:
        dist = metadata.distribution("sglang")
    except metadata.PackageNotFoundError:
        raise TargetError(
            f"--target sglang: SGLang is not installed in this Python ({sys.executable}); "
            "name a release (--target sglang==0.5.14) or a path (--target sglang:/path/to/sglang)"
        ) from None
    root = Path(str(dist.locate_file("")))
    return _source_at(root, dist.version, "installed", str(root))


def _from_path(path: Path) -> SGLangSource:
    if not path.exists():
        raise TargetError(f"--target sglang:{path}: no such file or directory")
    if path.is_file():
        classes = [name for name, rel in CLASS_FILES.items() if Path(rel).name == path.name]
        if not classes:
            known = ", ".join(Path(rel).name for rel in CLASS_FILES.values())
            raise TargetError(f"--target sglang:{path}: expected one of {known}")
        tags = path.parent.parent / "distributed" / Path(TAGS_FILE).name
        in_package = path.parent.parts[-3:] == ("sglang", "srt", "mem_cache")
        version = _version_at(path.parents[3]) if in_package else _git_describe(path.parent) or "unknown"
        return SGLangSource(version, "path", str(path), {classes[0]: path}, tags if tags.is_file() else None)
    # A checkout (python/sglang/...), a package root (.../site-packages) or the package itself.
    for root in (path / "python", path, path.parent):
        if (root / "sglang" / "srt" / "mem_cache").is_dir():
            return _source_at(root, _version_at(root), "path", str(path))
    raise TargetError(f"--target sglang:{path}: no sglang/srt/mem_cache under it (give a checkout or a file)")


def _source_at(root: Path, version: str, origin: str, location: str) -> SGLangSource:
    files = {name: root / rel for name, rel in CLASS_FILES.items() if (root / rel).is_file()}
    tags = root / TAGS_FILE
    return SGLangSource(version, origin, location, files, tags if tags.is_file() else None)


def _version_at(root: Path) -> str:
    """The generated version file's, else `git describe` of a checkout, else "unknown"."""
    try:
        text = (root / VERSION_FILE).read_text(encoding="utf-8")
    except OSError:
        return _git_describe(root) or "unknown"
    match = re.search(r"""^__version__\s*=\s*(?:version\s*=\s*)?["']([^"']+)["']""", text, re.MULTILINE)
    return match.group(1) if match else "unknown"


# A checkout is the user's but may come from anyone, and its .git/config can name commands
# git runs: core.fsmonitor and clean filters run when git reads the index and work tree
# (`describe --dirty` does), hooks on other commands. So git reads only refs and commits
# (no --dirty: the file's SHA-256 says which code ran), with fsmonitor and hooks off from the
# command line (which overrides the repository), no optional index writes, and git's own
# safe.directory check left as it is (a checkout owned by another user is not read).
GIT_SAFELY = ["-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "--no-optional-locks"]


def _git_describe(path: Path) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(path), *GIT_SAFELY, "describe", "--tags", "--always"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def release(version: str, progress=None) -> SGLangSource:  # noqa: ANN001 - a callable(str) or None
    """A release's files, from the cache or from its wheel (fetched with pip, no dependencies)."""
    target = cache_dir() / "sglang" / version
    if not _unpacked(target, WANTED_FILES):
        wheel = _download_wheel(version, cache_dir() / "wheels", progress)
        _unpack(wheel, target, lambda names: [rel for rel in WANTED_FILES if rel in names], WANTED_FILES)
    return _source_at(target, version, "wheel", f"sglang=={version} (cached in {target})")


# What `release_sources` unpacks: every Python module of the package and nothing else (a
# release's srt/ alone holds some 2,000 of them, 40 MB; its data files would double that).
SOURCES_WANTED = ("sglang/**/*.py",)


def release_sources(version: str, progress=None) -> Path:  # noqa: ANN001 - a callable(str) or None
    """The directory holding a release's whole `sglang` package (its .py files), unpacked once,
    from the same cached wheel as `release`, into a directory of its own."""
    target = cache_dir() / "sglang-sources" / version
    if not _unpacked(target, SOURCES_WANTED):
        wheel = _download_wheel(version, cache_dir() / "wheels", progress)
        _unpack(wheel, target, lambda names: sorted(n for n in names if _is_package_module(n)), SOURCES_WANTED)
    return target


def _is_package_module(name: str) -> bool:
    return name.startswith("sglang/") and name.endswith(".py") and ".." not in name.split("/")


@dataclass(frozen=True)
class SGLangTree:
    """A whole SGLang, to be read file by file: `path` is the directory holding the `sglang`
    package, or the one file a `sglang:FILE` target names."""

    version: str
    origin: str  # installed | wheel | path
    path: Path


def locate_tree(spec: TargetSpec, progress=None) -> SGLangTree:  # noqa: ANN001 - a callable(str) or None
    """The whole package a target names (`locate` finds only the HiCache modules in it)."""
    if spec.kind == "installed":
        source = _installed()
        return SGLangTree(source.version, "installed", Path(source.location))
    if spec.kind == "version":
        return SGLangTree(spec.value, "wheel", release_sources(spec.value, progress))
    path = Path(spec.value).expanduser()
    if not path.exists():
        raise TargetError(f"sglang:{path}: no such file or directory")
    if path.is_file():
        return SGLangTree("unknown", "path", path)
    for root in (path / "python", path, path.parent):
        if (root / "sglang" / "srt").is_dir():
            return SGLangTree(_version_at(root), "path", root)
    raise TargetError(f"sglang:{path}: no sglang/srt under it (give a checkout, a package root or a file)")


def _unpacked(target: Path, wanted: tuple[str, ...]) -> bool:
    """Unpacked before, and for the same ask (an older hicache may have wanted fewer files)."""
    try:
        lines = (target / UNPACKED_MARK).read_text(encoding="utf-8").splitlines()
    except OSError:
        return False
    return tuple(lines[1:]) == wanted


def _download_wheel(version: str, wheels: Path, progress) -> Path:  # noqa: ANN001
    found = sorted(wheels.glob(f"sglang-{version}-*.whl"))
    if found:
        return found[0]
    wheels.mkdir(parents=True, exist_ok=True)
    if progress is not None:
        progress(f"fetching the sglang {version} wheel (no dependencies) ...")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check"]
    cmd += ["--dest", str(wheels), f"sglang=={version}"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TargetError(f"--target sglang=={version}: could not run pip to fetch the wheel: {exc}") from None
    found = sorted(wheels.glob(f"sglang-{version}-*.whl"))
    if done.returncode != 0 or not found:
        lines = [ln for ln in (done.stderr or done.stdout).splitlines() if ln.strip()]
        why = lines[-1].strip() if lines else f"pip exited with {done.returncode}"
        raise TargetError(f"--target sglang=={version}: could not fetch the wheel: {why}")
    return found[0]


def _unpack(wheel: Path, target: Path, members: Callable[[set[str]], list[str]], wanted: tuple[str, ...]) -> None:
    """Take the members `members` picks from the wheel's names; written whole or not at all. The
    mark records `wanted` (what was asked for), so that a different ask unpacks again."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        with zipfile.ZipFile(wheel) as zf:
            for rel in members(set(zf.namelist())):
                out = staging / rel
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(zf.read(rel))
        (staging / UNPACKED_MARK).write_text("\n".join((wheel.name, *wanted)) + "\n", encoding="utf-8")
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    except (OSError, zipfile.BadZipFile) as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise TargetError(f"cannot unpack {wheel}: {exc}") from None


def release_versions(progress=None) -> list[str]:  # noqa: ANN001
    """Every sglang release on the package index, oldest first (from `pip index versions`)."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", "sglang", "--disable-pip-version-check"]
    if progress is not None:
        progress("listing sglang releases on the package index ...")
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TargetError(f"could not list sglang releases with pip: {exc}") from None
    match = re.search(r"Available versions:\s*(.+)", done.stdout)
    if done.returncode != 0 or not match:
        lines = [ln for ln in done.stderr.splitlines() if ln.strip() and "WARNING" not in ln]
        why = lines[-1].strip() if lines else f"pip exited with {done.returncode}"
        raise TargetError(f"could not list sglang releases: {why}")
    return sorted((v.strip() for v in match.group(1).split(",") if v.strip()), key=version_key)


def version_key(version: str) -> tuple:
    """Order release strings: 0.5.9 < 0.5.12 < 0.5.12.post1 < 0.5.13."""
    main, _, post = version.partition(".post")
    parts = tuple(int(p) if p.isdigit() else 0 for p in re.split(r"[.]", re.sub(r"[a-z].*$", "", main)))
    return (*parts, int(post) if post.isdigit() else -1)


def pick_versions(spec: str, available: list[str]) -> list[str]:
    """`A..B` (inclusive; either end may be left open) or `A,B,C`, from the releases available."""
    if ".." in spec:
        low, _, high = spec.partition("..")
        lo_key = version_key(low) if low else None
        hi_key = version_key(high) if high else None
        chosen = [
            v
            for v in sorted(available, key=version_key)
            if (lo_key is None or version_key(v) >= lo_key) and (hi_key is None or version_key(v) <= hi_key)
        ]
        for end in (low, high):
            if end and end not in available:
                raise UsageError(f"--versions: {end} is not an sglang release on the package index")
        if not chosen:
            raise UsageError(f"--versions {spec}: no release in that range")
        return chosen
    chosen = [v.strip() for v in spec.split(",") if v.strip()]
    unknown = [v for v in chosen if v not in available]
    if unknown or not chosen:
        raise UsageError(f"--versions: {', '.join(unknown) or 'empty list'}: not sglang releases on the package index")
    return sorted(dict.fromkeys(chosen), key=version_key)
