#!/usr/bin/env bash
# Installs what parbench builds and runs with. Idempotent: a second run changes nothing.
#   - Debian packages: compiler, CMake, Ninja, GoogleTest, nlohmann/json, shellcheck (the tests lint
#     docs/examples/'s SLURM script and ci/gate-job.sh with it).
#   - Google Benchmark, built in Release from Debian's source into .deps/ (see below).
#   - Python: an importable torch (the GPU machines bring 2.11.0+cu130) or, failing that, a
#     torch wheel pinned to 2.11.0 in the project-local .venv; matplotlib, scipy and pytest there too,
#     and PyYAML and jsonschema (the tests' schema check of docs/examples/'s TrainJob manifest), and
#     transformers pinned (the Llama models' reference).
#   - this checkout's Python package (pyproject.toml), editable, into that python.
# Prints the python to use as its last line (ci/build.sh reads it).
set -euo pipefail
cd "$(dirname "$0")/.."

readonly TORCH_VERSION=2.11.0
# Hugging Face's LlamaForCausalLM, the reference tests/python/test_llama_reference.py compares against.
readonly TRANSFORMERS_VERSION=5.25.0
readonly DEBIAN_PACKAGES=(g++ cmake ninja-build git libgtest-dev libgmock-dev nlohmann-json3-dev python3-venv shellcheck)

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

# Google Benchmark in Release, static, into a project-local prefix: Debian's libbenchmark is
# built without NDEBUG, so every run warned "Library was built as DEBUG" and the JSON said so.
# The source is the upstream tarball of Debian's source package (bookworm's, pinned), fetched
# once into .deps/ through a private apt configuration (the system's sources stay as they are)
# and kept there: machines without network (PARBENCH_NO_APT=1) build from the copy carried in .deps/.
# PARBENCH_BENCHMARK_PREFIX: where to install it (ci/build.sh reads the same variable).
readonly BENCHMARK_DEBIAN_VERSION=1.7.1-1
readonly BENCHMARK_SOURCE=.deps/benchmark_${BENCHMARK_DEBIAN_VERSION%-*}.orig.tar.gz
benchmark_prefix=${PARBENCH_BENCHMARK_PREFIX:-$PWD/.deps/benchmark-release}
# Names the source a prefix was built from, so a new pin rebuilds and nothing else does.
benchmark_stamp=$benchmark_prefix/parbench-built-from

fetch_benchmark_source() {
  local apt_dir
  apt_dir=$(mktemp -d /tmp/parbench-apt.XXXX)
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" .deps
  echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main" \
    >"$apt_dir/sources.list"
  local apt_options=(-qq -o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
                     -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o Dir::Cache::pkgcache=
                     -o Dir::Cache::srcpkgcache= -o APT::Sandbox::User=root)
  echo "setup: fetching Google Benchmark's source (Debian benchmark $BENCHMARK_DEBIAN_VERSION) into .deps/" >&2
  apt-get "${apt_options[@]}" update >&2
  (cd .deps && apt-get "${apt_options[@]}" source --download-only "benchmark=$BENCHMARK_DEBIAN_VERSION") >&2
  # apt has checked the upstream tarball against the signed index; Debian's packaging is not used.
  rm -rf "$apt_dir" ".deps/benchmark_$BENCHMARK_DEBIAN_VERSION.dsc" ".deps/benchmark_$BENCHMARK_DEBIAN_VERSION.debian.tar.xz"
}

# Built outside the work tree (its CMake would read this repository's git tags as its version)
# and installed under a temporary name, so an interrupted build is never taken for a finished one.
build_benchmark_release() {
  local work
  work=$(mktemp -d /tmp/parbench-benchmark.XXXX)
  rm -rf "$benchmark_prefix.partial"
  tar xzf "$BENCHMARK_SOURCE" -C "$work" --strip-components=1
  echo "setup: building Google Benchmark (Release) into $benchmark_prefix" >&2
  cmake -S "$work" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBENCHMARK_ENABLE_TESTING=OFF \
    -DBENCHMARK_ENABLE_WERROR=OFF -DBENCHMARK_INSTALL_DOCS=OFF -DBUILD_SHARED_LIBS=OFF \
    -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DCMAKE_INSTALL_LIBDIR=lib "-DCMAKE_INSTALL_PREFIX=$benchmark_prefix.partial" >/dev/null
  cmake --build "$work/build" -j "$(nproc)" >/dev/null
  cmake --install "$work/build" >/dev/null
  echo "$BENCHMARK_DEBIAN_VERSION Release" >"$benchmark_prefix.partial/parbench-built-from"
  rm -rf "$benchmark_prefix" "$work"
  mv "$benchmark_prefix.partial" "$benchmark_prefix"
}

if [[ ! -f $BENCHMARK_SOURCE && ${PARBENCH_NO_APT:-0} != 1 ]]; then
  fetch_benchmark_source
fi
if [[ $(cat "$benchmark_stamp" 2>/dev/null) != "$BENCHMARK_DEBIAN_VERSION Release" ]]; then
  if [[ ! -f $BENCHMARK_SOURCE ]]; then
    echo "setup: $BENCHMARK_SOURCE is missing and PARBENCH_NO_APT=1 forbids fetching it; ci/gpu-check.sh's header says how to put it there" >&2
    exit 1
  fi
  build_benchmark_release
fi

# The Python package of this checkout (pyproject.toml: plots/parbench_results, the figures and
# the gate among its modules), editable, so scripts and tests import the checkout's code.
# Offline (the GPU machines) pip builds it only where setuptools is already there; where pip
# cannot (no pip, no setuptools, a system python that refuses pip), a .pth file in site-packages
# puts plots/ on the path, which is what the editable install amounts to.
install_python_package() {
  local python=$1 site
  if [[ $("$python" -c "import parbench_results, os; print(os.path.dirname(os.path.dirname(parbench_results.__file__)))" \
          2>/dev/null) == "$PWD/plots" ]]; then
    return
  fi
  site=$("$python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  rm -f "$site/parbench.pth"  # a fallback left by another checkout
  echo "setup: installing the parbench_results package (pyproject.toml) into $python, editable" >&2
  local pip_output reason
  if ! pip_output=$("$python" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-build-isolation \
                    -e . 2>&1); then
    reason=$(grep -o "error: .*" <<<"$pip_output" | paste -s -d ";" - || true)
    echo "setup: pip could not install it (${reason:-$(tail -n 1 <<<"$pip_output")});" \
      "$site/parbench.pth puts $PWD/plots on the path instead" >&2
    echo "$PWD/plots" >"$site/parbench.pth"
  fi
}

# A system python that already imports torch (the GPU machines) is used as it is.
if python3 -c "import torch, matplotlib, scipy" 2>/dev/null; then
  python=$(command -v python3)
else
  if [[ ! -x .venv/bin/python ]]; then
    python3 -m venv .venv >&2
  fi
  if ! .venv/bin/python -c "import torch, matplotlib, scipy, pytest, yaml, jsonschema, transformers" 2>/dev/null; then
    echo "setup: installing torch==$TORCH_VERSION, matplotlib, scipy, pytest, pyyaml, jsonschema and" \
      "transformers==$TRANSFORMERS_VERSION into .venv" >&2
    .venv/bin/python -m pip install -q --upgrade pip >&2
    # setuptools and wheel: the build backend pip installs this checkout's package with, offline.
    .venv/bin/python -m pip install -q "torch==$TORCH_VERSION" matplotlib scipy pytest pyyaml jsonschema \
      "transformers==$TRANSFORMERS_VERSION" "setuptools>=64" wheel >&2
  fi
  python=$PWD/.venv/bin/python
fi
install_python_package "$python"
echo "$python"
