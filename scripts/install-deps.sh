#!/usr/bin/env bash
# Installs the Debian packages Primus-C++ builds and tests with. Idempotent: packages already present are skipped,
# so a second run costs one dpkg query and no network.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libyaml-cpp-dev libcli11-dev libfmt-dev nlohmann-json3-dev libxxhash-dev
  libopenblas-dev libomp-dev libgtest-dev libgmock-dev
  libpcre2-dev libsentencepiece-dev libopenmpi-dev openmpi-bin
  fortunes fortunes-min
  wordnet-base  # WordNet 3.0 database: the SFT corpus of `primus data sft-wordnet`
  python3 python3-numpy
  sentencepiece
  clang-format
  ccache
  clang libclang-rt-14-dev
)

# node + npm run the tokenizer reference test (tools/tokenizer_ref); a machine with NodeSource's nodejs (which
# bundles npm and conflicts with Debian's npm package) already has them.
if ! command -v npm >/dev/null 2>&1; then packages+=(nodejs npm); fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
