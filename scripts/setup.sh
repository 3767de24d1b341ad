#!/usr/bin/env bash
# Create .venv and install hicache with its test extra.
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
echo "ready: .venv/bin/hicache"
