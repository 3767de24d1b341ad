"""sglang_target/locate.py: --target parsing, finding a checkout or file, and the release cache.

No test reaches pip or the network: a wheel is pre-seeded in the cache, or subprocess.run
is replaced by a fake that answers as pip would.
"""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from hicache_cli.errors import UsageError
from hicache_cli.sglang_target import locate as locate_module
from hicache_cli.sglang_target.locate import (
    SOURCES_WANTED,
    WANTED_FILES,
    SGLangSource,
    SGLangTree,
    TargetError,
    TargetSpec,
    cache_dir,
    locate,
    locate_tree,
    parse_target,
    release,
    release_sources,
    release_versions,
    version_key,
)
from tests.sglang_target.conftest import FakeGit, FakePip
from tests.sglang_target.families import (
    DRAIN_TAGGED,
    FALLBACK_VERSION_REL,
    HIRADIX_REL,
    TAGS_REL,
    UNIFIED_REL,
    VERSION_REL,
    make_checkout,
    make_wheel,
)

# --- parse_target --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("model", None),
        (" model ", None),
        ("sglang", TargetSpec("installed")),
        ("sglang==0.5.14", TargetSpec("version", "0.5.14")),
        ("sglang==0.5.12.post1", TargetSpec("version", "0.5.12.post1")),
        ("sglang==0.5.14rc1", TargetSpec("version", "0.5.14rc1")),
        ("sglang:/p", TargetSpec("path", "/p")),
        ("sglang:~/src/sglang", TargetSpec("path", "~/src/sglang")),
    ],
)
def test_parse_target(text: str, expected: TargetSpec | None) -> None:
    assert parse_target(text) == expected


@pytest.mark.parametrize("spec", [TargetSpec("installed"), TargetSpec("version", "0.5.14"), TargetSpec("path", "/p")])
def test_a_spec_prints_as_it_was_given(spec: TargetSpec) -> None:
    assert parse_target(str(spec)) == spec


@pytest.mark.parametrize(
    "text",
    ["", "torch", "Sglang", "sglang=0.5.14", "sglang==", "sglang:", "sglang==latest", "sglang==0.5.14 extra", "vllm"],
)
def test_bad_targets_are_refused_in_one_line(text: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_target(text)
    message = str(caught.value)
    assert message.startswith("--target: ")
    assert "\n" not in message
    assert caught.value.exit_code == 2


def test_latest_is_not_a_release_version() -> None:
    with pytest.raises(UsageError, match="'latest' is not a release version"):
        parse_target("sglang==latest")


# --- a checkout, a package root, the package, a file -----------------------------------------


def assert_whole_checkout(source: SGLangSource, package: Path) -> None:
    assert source.version == "9.9.9"
    assert source.origin == "path"
    assert source.files == {
        "HiRadixCache": package / HIRADIX_REL,
        "UnifiedRadixCache": package / UNIFIED_REL,
    }
    assert source.tags_file == package / TAGS_REL


def test_from_a_checkout_root(checkout: Path) -> None:
    source = locate(TargetSpec("path", str(checkout)))
    assert_whole_checkout(source, checkout / "python")
    assert source.location == str(checkout)


def test_from_the_package_root(checkout: Path) -> None:
    source = locate(TargetSpec("path", str(checkout / "python")))
    assert_whole_checkout(source, checkout / "python")
    assert source.location == str(checkout / "python")


def test_from_the_sglang_package_itself(checkout: Path) -> None:
    source = locate(TargetSpec("path", str(checkout / "python" / "sglang")))
    assert_whole_checkout(source, checkout / "python")


def test_from_a_home_relative_path(checkout: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(checkout.parent))
    source = locate(TargetSpec("path", f"~/{checkout.name}"))
    assert_whole_checkout(source, checkout / "python")


def test_from_the_hiradix_file(checkout: Path) -> None:
    path = checkout / "python" / HIRADIX_REL
    source = locate(TargetSpec("path", str(path)))
    assert source.files == {"HiRadixCache": path}
    assert source.tags_file == checkout / "python" / TAGS_REL
    assert source.version == "9.9.9"
    assert source.location == str(path)


def test_from_the_unified_file(checkout: Path) -> None:
    path = checkout / "python" / UNIFIED_REL
    assert locate(TargetSpec("path", str(path))).files == {"UnifiedRadixCache": path}


def test_a_lone_file_has_no_tags_file_and_no_version(tmp_path: Path, fake_git: FakeGit) -> None:
    path = tmp_path / "hiradix_cache.py"
    path.write_text(DRAIN_TAGGED, encoding="utf-8")
    source = locate(TargetSpec("path", str(path)))
    assert source.files == {"HiRadixCache": path}
    assert source.tags_file is None
    assert source.version == "unknown"


def test_a_file_of_another_name_is_refused(checkout: Path) -> None:
    path = checkout / "python" / "sglang" / "version.py"
    with pytest.raises(TargetError, match="expected one of hiradix_cache.py, unified_radix_cache.py"):
        locate(TargetSpec("path", str(path)))


def test_a_path_that_does_not_exist(tmp_path: Path) -> None:
    with pytest.raises(TargetError) as caught:
        locate(TargetSpec("path", str(tmp_path / "nowhere")))
    assert "no such file or directory" in str(caught.value)
    assert isinstance(caught.value, UsageError)


def test_a_directory_without_mem_cache(tmp_path: Path) -> None:
    (tmp_path / "python" / "sglang" / "srt").mkdir(parents=True)
    with pytest.raises(TargetError, match="no sglang/srt/mem_cache under it"):
        locate(TargetSpec("path", str(tmp_path)))


def test_a_checkout_with_one_module(tmp_path: Path) -> None:
    root = make_checkout(tmp_path, hiradix=None, tags=False)
    source = locate(TargetSpec("path", str(root)))
    assert list(source.files) == ["UnifiedRadixCache"]
    assert source.tags_file is None


def test_version_unknown_without_version_file_or_git(tmp_path: Path, fake_git: FakeGit) -> None:
    root = make_checkout(tmp_path, version=None)
    assert locate(TargetSpec("path", str(root))).version == "unknown"


def test_the_fallback_version_py_is_not_read(tmp_path: Path, fake_git: FakeGit) -> None:
    root = make_checkout(tmp_path, version=None)
    assert (root / "python" / FALLBACK_VERSION_REL).is_file()
    assert locate(TargetSpec("path", str(root))).version != "0.0.0.dev0"


def test_a_checkout_without_version_file_asks_git(tmp_path: Path, fake_git: FakeGit) -> None:
    fake_git.describe = "v0.5.14-12-gabcdef0"
    root = make_checkout(tmp_path, version=None)
    assert locate(TargetSpec("path", str(root))).version == "v0.5.14-12-gabcdef0"
    assert fake_git.calls and fake_git.calls[0][:3] == ["git", "-C", str(root / "python")]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("__version__ = '0.5.14'\n", "0.5.14"),
        ("__version__ = version = '0.5.14'\n", "0.5.14"),
        ('"""doc"""\n__version__   =   "0.5.12.post1"\n', "0.5.12.post1"),
        ("VERSION = (0, 5)\n", "unknown"),
    ],
)
def test_version_read_from_version_file(tmp_path: Path, text: str, expected: str) -> None:
    root = make_checkout(tmp_path, version=text)
    assert locate(TargetSpec("path", str(root))).version == expected


# --- version_key ----------------------------------------------------------------------------


def test_version_key_orders_releases() -> None:
    assert version_key("0.5.9") < version_key("0.5.12") < version_key("0.5.12.post1") < version_key("0.5.13")
    assert version_key("0.4.10") < version_key("0.5.0") < version_key("1.0.0")


def test_version_key_sorts_a_release_list() -> None:
    shuffled = ["0.5.13", "0.5.12.post1", "0.4.9", "0.5.9", "0.5.12", "0.5.12.post2", "0.5.20"]
    assert sorted(shuffled, key=version_key) == [
        "0.4.9",
        "0.5.9",
        "0.5.12",
        "0.5.12.post1",
        "0.5.12.post2",
        "0.5.13",
        "0.5.20",
    ]


# --- the release cache ------------------------------------------------------------------------


def test_cache_dir_from_env(cache_home: Path) -> None:
    assert cache_dir() == cache_home


def test_cache_dir_defaults_under_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HICACHE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "hicache"


UNWANTED = {
    "sglang/srt/mem_cache/radix_cache.py": "class RadixCache:\n    pass\n",
    "sglang/__init__.py": "",
    "sglang-9.9.9.dist-info/METADATA": "Name: sglang\nVersion: 9.9.9\n",
}


def seed_wheel(cache_home: Path, version: str = "9.9.9") -> Path:
    return make_wheel(cache_home / "wheels" / f"sglang-{version}-py3-none-any.whl", extra=UNWANTED)


def files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_release_unpacks_only_the_wanted_files(cache_home: Path, no_pip: list[list[str]]) -> None:
    seed_wheel(cache_home)
    source = release("9.9.9")
    target = cache_home / "sglang" / "9.9.9"
    assert files_under(target) == {*WANTED_FILES, ".complete"}
    assert (target / ".complete").read_text(encoding="utf-8").splitlines()[0] == "sglang-9.9.9-py3-none-any.whl"
    assert (target / HIRADIX_REL).read_text(encoding="utf-8") == DRAIN_TAGGED
    assert source.version == "9.9.9"
    assert source.origin == "wheel"
    assert source.files == {"HiRadixCache": target / HIRADIX_REL, "UnifiedRadixCache": target / UNIFIED_REL}
    assert source.tags_file == target / TAGS_REL
    assert str(target) in source.location
    assert no_pip == []
    # no staging directory is left beside it
    assert sorted(p.name for p in (cache_home / "sglang").iterdir()) == ["9.9.9"]


def test_a_second_release_call_reads_the_cache(cache_home: Path, no_pip: list[list[str]]) -> None:
    wheel = seed_wheel(cache_home)
    first = release("9.9.9")
    wheel.unlink()  # only the unpacked files remain
    marker = (cache_home / "sglang" / "9.9.9" / ".complete").stat().st_mtime_ns
    assert release("9.9.9") == first
    assert (cache_home / "sglang" / "9.9.9" / ".complete").stat().st_mtime_ns == marker
    assert no_pip == []


def test_locate_a_version_goes_through_release(cache_home: Path, no_pip: list[list[str]]) -> None:
    seed_wheel(cache_home)
    assert locate(TargetSpec("version", "9.9.9")).origin == "wheel"


def test_an_unfinished_unpack_is_redone(cache_home: Path, no_pip: list[list[str]]) -> None:
    seed_wheel(cache_home)
    stale = cache_home / "sglang" / "9.9.9"
    (stale / "sglang").mkdir(parents=True)
    (stale / "sglang" / "leftover.py").write_text("x = 1\n", encoding="utf-8")
    release("9.9.9")
    assert files_under(stale) == {*WANTED_FILES, ".complete"}


def test_an_unpack_by_an_older_hicache_is_redone(cache_home: Path, no_pip: list[list[str]]) -> None:
    """The mark lists the files wanted when it was written; an older list means unpack again."""
    seed_wheel(cache_home)
    target = cache_home / "sglang" / "9.9.9"
    (target / "sglang" / "srt" / "mem_cache").mkdir(parents=True)
    (target / HIRADIX_REL).write_text(DRAIN_TAGGED, encoding="utf-8")
    (target / ".complete").write_text("sglang-9.9.9-py3-none-any.whl\n", encoding="utf-8")
    source = release("9.9.9")
    assert files_under(target) == {*WANTED_FILES, ".complete"}
    assert source.tags_file == target / TAGS_REL


def test_a_wheel_without_some_files_unpacks_what_it_has(cache_home: Path, no_pip: list[list[str]]) -> None:
    wheel = cache_home / "wheels" / "sglang-9.9.9-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(HIRADIX_REL, DRAIN_TAGGED)
    source = release("9.9.9")
    assert list(source.files) == ["HiRadixCache"]
    assert source.tags_file is None
    assert source.version == "9.9.9"  # the release asked for, though the wheel has no version.py


def test_a_broken_wheel_is_a_target_error(cache_home: Path, no_pip: list[list[str]]) -> None:
    wheel = cache_home / "wheels" / "sglang-9.9.9-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    wheel.write_bytes(b"not a zip")
    with pytest.raises(TargetError, match="cannot unpack"):
        release("9.9.9")
    assert not (cache_home / "sglang" / "9.9.9").exists()
    assert list((cache_home / "sglang").iterdir()) == []  # the staging directory is gone too


def test_release_fetches_a_missing_wheel_with_pip(cache_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pip = FakePip()
    monkeypatch.setattr(subprocess, "run", pip)
    said: list[str] = []
    source = release("9.9.9", said.append)
    assert len(pip.calls) == 1
    cmd = pip.calls[0]
    assert cmd[1:4] == ["-m", "pip", "download"]
    assert "--no-deps" in cmd
    assert "--only-binary=:all:" in cmd
    assert cmd[cmd.index("--dest") + 1] == str(cache_home / "wheels")
    assert cmd[-1] == "sglang==9.9.9"
    assert said == ["fetching the sglang 9.9.9 wheel (no dependencies) ..."]
    assert source.files["HiRadixCache"].read_text(encoding="utf-8") == DRAIN_TAGGED


def test_a_failed_download_says_pips_last_line(cache_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stderr = (
        "ERROR: Could not find a version that satisfies the requirement sglang==0.0.0\n"
        "ERROR: No matching distribution found for sglang==0.0.0\n\n"
    )
    monkeypatch.setattr(subprocess, "run", FakePip(returncode=1, stderr=stderr))
    with pytest.raises(TargetError) as caught:
        release("0.0.0")
    message = str(caught.value)
    assert "ERROR: No matching distribution found for sglang==0.0.0" in message
    assert message.startswith("--target sglang==0.0.0: could not fetch the wheel")
    assert "\n" not in message
    assert not (cache_home / "sglang" / "0.0.0").exists()


def test_pip_succeeding_without_a_wheel_is_a_failure(cache_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess, "run", FakePip(returncode=0, write_wheel=False))
    with pytest.raises(TargetError, match="pip exited with 0"):
        release("9.9.9")


def test_pip_that_cannot_start_is_a_target_error(cache_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(cmd: list[str], *args: Any, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        raise FileNotFoundError(2, "No such file or directory", cmd[0])

    monkeypatch.setattr(subprocess, "run", missing)
    with pytest.raises(TargetError, match="could not run pip"):
        release("9.9.9")


def test_a_timed_out_pip_is_a_target_error(cache_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def slow(cmd: list[str], *args: Any, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired(cmd, kwargs.get("timeout", 0))

    monkeypatch.setattr(subprocess, "run", slow)
    with pytest.raises(TargetError, match="could not run pip"):
        release("9.9.9")


# --- release_versions ---------------------------------------------------------------------------


def test_release_versions_oldest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    stdout = "sglang (0.5.23)\nAvailable versions: 0.5.23, 0.5.12.post1, 0.5.12, 0.5.9\n"
    pip = FakePip(stdout=stdout)
    monkeypatch.setattr(subprocess, "run", pip)
    said: list[str] = []
    assert release_versions(said.append) == ["0.5.9", "0.5.12", "0.5.12.post1", "0.5.23"]
    assert pip.calls[0][1:6] == ["-m", "pip", "index", "versions", "sglang"]
    assert said == ["listing sglang releases on the package index ..."]


def test_release_versions_failure_skips_pip_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    stderr = (
        "ERROR: No matching distribution found for sglang\nWARNING: pip index is currently an experimental command.\n"
    )
    monkeypatch.setattr(subprocess, "run", FakePip(returncode=1, stderr=stderr))
    with pytest.raises(TargetError) as caught:
        release_versions()
    assert str(caught.value) == "could not list sglang releases: ERROR: No matching distribution found for sglang"


def test_release_versions_without_the_versions_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess, "run", FakePip(stdout="sglang (0.5.23)\n"))
    with pytest.raises(TargetError, match="pip exited with 0"):
        release_versions()


# --- the installed distribution --------------------------------------------------------------------


def test_installed_sglang_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    def not_found(name: str) -> metadata.Distribution:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(locate_module.metadata, "distribution", not_found)
    with pytest.raises(TargetError) as caught:
        locate(TargetSpec("installed"))
    message = str(caught.value)
    assert "not installed" in message
    assert "sglang==" in message
    assert "\n" not in message


class FakeDistribution:
    """Mimics importlib.metadata's Distribution: a version and locate_file('') at site-packages."""

    def __init__(self, site: Path, version: str) -> None:
        self.site = site
        self.version = version

    def locate_file(self, path: str) -> Path:
        return self.site / path


def test_installed_sglang_found(checkout: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = checkout / "python"
    monkeypatch.setattr(locate_module.metadata, "distribution", lambda name: FakeDistribution(site, "9.9.10"))
    source = locate(TargetSpec("installed"))
    assert source.origin == "installed"
    assert source.version == "9.9.10"  # the distribution's, not version.py's
    assert source.location == str(site)
    assert set(source.files) == {"HiRadixCache", "UnifiedRadixCache"}
    assert source.tags_file == site / TAGS_REL


def test_the_version_and_tags_files_are_wanted() -> None:
    assert VERSION_REL in WANTED_FILES
    assert TAGS_REL in WANTED_FILES
    assert FALLBACK_VERSION_REL not in WANTED_FILES or FALLBACK_VERSION_REL == VERSION_REL


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_describe_runs_nothing_the_checkout_configures(tmp_path: Path) -> None:
    """A checkout's .git/config named commands (core.fsmonitor, a clean filter) that `git
    describe --dirty` ran; the version is still read from the tags."""
    root = make_checkout(tmp_path / "evil", version=None)
    ran = tmp_path / "ran"
    script = tmp_path / "payload.sh"
    script.write_text(f"#!/bin/sh\necho $0 >> {ran}\ncat\n", encoding="utf-8")
    script.chmod(0o755)

    def git(*args: str) -> None:
        identity = ["-c", "user.email=t@example.com", "-c", "user.name=t", "-c", "commit.gpgsign=false"]
        subprocess.run(["git", "-C", str(root), *identity, *args], check=True, capture_output=True)

    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "a checkout")
    git("tag", "v0.5.99")
    git("config", "core.fsmonitor", str(script))
    git("config", "filter.evil.clean", str(script))
    (root / ".gitattributes").write_text("* filter=evil\n", encoding="utf-8")
    (root / "python" / HIRADIX_REL).touch()  # stat-dirty: an index refresh would re-read it through the filter
    assert locate(TargetSpec("path", str(root))).version == "v0.5.99"
    assert not ran.exists(), ran.read_text()


# --- the whole package, for hicache lint ------------------------------------------------------


def test_release_sources_unpacks_every_module_of_the_package(cache_home: Path, no_pip: list[list[str]]) -> None:
    seed_wheel(cache_home)
    root = release_sources("9.9.9")
    assert root == cache_home / "sglang-sources" / "9.9.9"
    modules = {rel for rel in files_under(root) if rel != ".complete"}
    assert "sglang/srt/mem_cache/radix_cache.py" in modules
    assert "sglang/__init__.py" in modules
    assert all(rel.startswith("sglang/") and rel.endswith(".py") for rel in modules)  # no dist-info
    assert (root / ".complete").read_text(encoding="utf-8").splitlines() == [
        "sglang-9.9.9-py3-none-any.whl",
        *SOURCES_WANTED,
    ]


def test_release_sources_and_release_share_the_wheel_and_keep_their_own_dirs(
    cache_home: Path, no_pip: list[list[str]]
) -> None:
    wheel = seed_wheel(cache_home)
    release("9.9.9")
    root = release_sources("9.9.9")
    wheel.unlink()  # both are unpacked now: neither needs the wheel again
    assert release_sources("9.9.9") == root
    assert files_under(cache_home / "sglang" / "9.9.9") == {*WANTED_FILES, ".complete"}


def test_locate_tree_of_each_kind(cache_home: Path, checkout: Path, no_pip: list[list[str]]) -> None:
    seed_wheel(cache_home)
    assert locate_tree(TargetSpec("version", "9.9.9")) == SGLangTree(
        "9.9.9", "wheel", cache_home / "sglang-sources" / "9.9.9"
    )
    assert locate_tree(TargetSpec("path", str(checkout))) == SGLangTree("9.9.9", "path", checkout / "python")
    assert locate_tree(TargetSpec("path", str(checkout / "python" / "sglang"))).path == checkout / "python"
    one_file = checkout / "python" / HIRADIX_REL
    assert locate_tree(TargetSpec("path", str(one_file))) == SGLangTree("unknown", "path", one_file)


def test_locate_tree_refuses_what_holds_no_sglang(tmp_path: Path) -> None:
    with pytest.raises(TargetError, match="no such file or directory"):
        locate_tree(TargetSpec("path", str(tmp_path / "nowhere")))
    with pytest.raises(TargetError, match="no sglang/srt under it"):
        locate_tree(TargetSpec("path", str(tmp_path)))
