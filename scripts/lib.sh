# SPDX-License-Identifier: Apache-2.0
# Shared by the scripts: install Debian packages when missing, and build.
# shellcheck shell=bash
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# golang-go, nodejs: the HTTP/2 clients of tests/integration/http2_clients_test.cc.
BUILD_PACKAGES=(build-essential cmake ninja-build pkg-config libevent-dev node-llhttp libssl-dev
  librocksdb-dev libtomlplusplus-dev libgtest-dev libgmock-dev libbenchmark-dev curl openssl
  postgresql libpq-dev libnghttp2-dev nghttp2-client golang-go nodejs libjemalloc-dev)
# The Patroni tests and scripts/chaos --backend patroni: etcd, Patroni, HAProxy (scripts/test).
PATRONI_PACKAGES=(patroni etcd-server haproxy)

# ensure_packages PKG...: apt-get install the ones not installed (apt-get update once first).
ensure_packages() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing: ${missing[*]}" >&2
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# build_tree DIR [cmake args...]: configure (once) and build everything with Ninja.
# BUILD_TARGETS="a b" limits the build to those targets.
build_tree() {
  local dir="$1"; shift
  ensure_packages "${BUILD_PACKAGES[@]}"
  if [ ! -f "$dir/build.ninja" ]; then
    cmake -S "$ROOT" -B "$dir" -G Ninja "$@" >&2
  fi
  local targets=()
  for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
  cmake --build "$dir" -j "$(nproc)" "${targets[@]}" >&2
}
