#!/usr/bin/env bash
# Installs what parbench builds and runs with. Idempotent: a second run changes nothing.
#   - Debian packages: compiler, CMake, Ninja, Google Benchmark, GoogleTest, nlohmann/json.
#   - Python: an importable torch (the GPU machines bring 2.11.0+cu130) or, failing that, a
#     torch wheel pinned to 2.11.0 in the project-local .venv; matplotlib, scipy and pytest there too.
# Prints the python to use as its last line (ci/build.sh reads it).
set -euo pipefail
cd "$(dirname "$0")/.."

readonly TORCH_VERSION=2.11.0
readonly DEBIAN_PACKAGES=(g++ cmake ninja-build git libbenchmark-dev libgtest-dev libgmock-dev nlohmann-json3-dev python3-venv)

# PARBENCH_NO_APT=1: the libraries come from elsewhere (the GPU machines have no network;
# ci/gpu-check.sh unpacks them from .deps/).
missing=()
[[ ${PARBENCH_NO_APT:-0} == 1 ]] || for package in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# A system python that already imports torch (the GPU machines) is used as it is.
if python3 -c "import torch, matplotlib, scipy" 2>/dev/null; then
  command -v python3
  exit 0
fi

if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv >&2
fi
if ! .venv/bin/python -c "import torch, matplotlib, scipy, pytest" 2>/dev/null; then
  echo "setup: installing torch==$TORCH_VERSION, matplotlib, scipy and pytest into .venv" >&2
  .venv/bin/python -m pip install -q --upgrade pip >&2
  .venv/bin/python -m pip install -q "torch==$TORCH_VERSION" matplotlib scipy pytest >&2
fi
echo "$PWD/.venv/bin/python"
