#!/usr/bin/env bash
# Create .venv and install hicache with its test extra (and, as root on Debian, chromium and promtool for two tests).
# Prefers the CPU build of torch that lies on this machine's disk (torch==2.13.0) so
# that pip does not download a multi-GB CUDA build; elsewhere any torch>=2.6 will do.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install --quiet "torch==2.13.0" 2>/dev/null \
    || .venv/bin/python -m pip install --quiet "torch>=2.6"
fi
.venv/bin/python -m pip install --quiet -e ".[test]"
# Byte-compile hicache's own modules, as a regular (not editable) install does: each
# `hicache` command, rank and test worker then reads them instead of compiling them again
# (0.1 s a command), also where PYTHONDONTWRITEBYTECODE=1 keeps Python from writing them.
.venv/bin/python -m compileall -q -j 0 hicache_cli hicache_model scripts tests >/dev/null
# The same for pytest's assertion-rewritten test modules (its own pyc beside each, which it
# reads whatever PYTHONDONTWRITEBYTECODE says but only writes without it): written once here
# by a collection, each pytest worker and inner session reads them instead of rewriting every
# test module again (~3 CPU-s a process).
env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -m pytest --collect-only -q -n 0 -p no:cacheprovider >/dev/null \
  || echo "setup: collecting the tests failed (pytest says why when the tests run); the environment is ready"

# Tools two tests use, from Debian's packages when run as root where apt-get exists: chromium,
# a real browser for the report page (tests/integration/test_report_page_browser.py; about 2
# minutes and 480 MB the first time; HICACHE_NO_BROWSER=1 skips it), and promtool (Debian's
# prometheus, about 100 MB), which evaluates deploy/'s alerting rules (tests/test_deploy.py).
# Without one, its test is skipped, saying why.
debian_package() {  # COMMAND PACKAGE [APT OPTION]: install PACKAGE unless COMMAND is there
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "setup: no $1 (and not root with apt-get to install it); the test that uses it will be skipped"
    return 0
  fi
  echo "setup: installing $2 (apt-get) for the test that uses $1"
  if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ${3:-} "$2" || {
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ${3:-} "$2"; }; } >/dev/null 2>&1; then
    echo "setup: could not install $2; the test that uses $1 will be skipped"
  fi
}
if [ "${HICACHE_NO_BROWSER:-}" = 1 ]; then
  echo "setup: HICACHE_NO_BROWSER=1: no chromium; the report page's browser test will be skipped"
else
  debian_package chromium chromium
fi
debian_package promtool prometheus --no-install-recommends
echo "ready: .venv/bin/hicache"
