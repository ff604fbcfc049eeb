#!/usr/bin/env bash
# Fetches Debian's CUDA 11.8 and 12.4 toolchains and unpacks them, without installing them, for
# building the real-GPU test programs against older CUDA runtimes (tests/gpu/compat/build.sh).
#
# Usage: tests/gpu/compat/toolchains.sh FOLDER
#
#   FOLDER/cuda-11.8   bookworm non-free: nvidia-cuda-toolkit, nvidia-cuda-dev, libnvvm4 (11.8.89)
#   FOLDER/cuda-12.4   trixie non-free: the same packages (12.4.131 / 12.4.127)
#
# FOLDER must lie outside the repository (a few GiB: nvidia-cuda-dev carries every CUDA library).
# The packages are fetched with `apt-get download` through a private apt configuration
# (FOLDER/apt/<release>: its own sources.list, package lists and cache; the system's apt
# sources and state are not touched) and unpacked with `dpkg -x`. They are never installed:
# bookworm's nvidia-cuda-dev pulls a libcuda package and trixie's packages a newer libc.
#
# Each unpacked tree gets an nvcc.profile in usr/lib/nvidia-cuda-toolkit/bin/ that points nvcc at
# that tree (libdevice, cicc/ptxas/fatbinary/nvlink, headers, libraries; the Debian package's
# profile is a link to /etc/nvcc.profile, i.e. to /usr) and a file vgpu-toolchain.env that
# build.sh reads: NVCC (the compiler), CCBIN (the host compiler: g++-11 for 11.8, whose nvcc
# refuses GCC 12; g++-12 for 12.4) and CUDA_RELEASE.
#
# Installs g++-11 (Debian package, bookworm main) when it is missing; needs root or sudo for that
# only. Safe to run again: downloaded packages are kept in FOLDER/debs and trees are re-unpacked.
set -euo pipefail

usage() { echo "usage: tests/gpu/compat/toolchains.sh FOLDER   (outside the repository)" >&2; exit 2; }
[ $# -eq 1 ] || usage
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
mkdir -p "$1"
FOLDER=$(cd "$1" && pwd)
case "$FOLDER/" in
  "$ROOT"/*) echo "toolchains.sh: $FOLDER is inside the repository ($ROOT); choose a folder outside it" >&2; exit 2 ;;
esac
for tool in apt-get dpkg; do
  command -v $tool >/dev/null || { echo "toolchains.sh: needs $tool (Debian/Ubuntu)" >&2; exit 1; }
done
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$KEYRING" ] || { echo "toolchains.sh: $KEYRING missing (package debian-archive-keyring)" >&2; exit 1; }
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PACKAGES=(nvidia-cuda-toolkit nvidia-cuda-dev libnvvm4)

as_root=()
[ "$(id -u)" -ne 0 ] && as_root=(sudo)
if ! command -v g++-11 >/dev/null; then
  echo "toolchains.sh: installing g++-11 (CUDA 11.8's nvcc needs GCC 11 or older)"
  DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq --no-install-recommends g++-11
fi

# fetch <release> <suite>: the packages of <suite> non-free into FOLDER/debs/<release>.
fetch() {
  local release=$1 suite=$2
  local apt_dir="$FOLDER/apt/$release" debs="$FOLDER/debs/$release"
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$debs"
  echo "deb [signed-by=$KEYRING] $MIRROR $suite non-free" >"$apt_dir/sources.list"
  local apt_options=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o "Debug::NoLocking=1"
    -o "APT::Sandbox::User=root")
  echo "toolchains.sh: $release: package lists of $suite non-free"
  apt-get "${apt_options[@]}" -qq update
  local missing=()
  for p in "${PACKAGES[@]}"; do
    local version
    version=$(apt-cache "${apt_options[@]}" show --no-all-versions "$p" | sed -n 's/^Version: //p' | head -1)
    [ -n "$version" ] || { echo "toolchains.sh: $p not found in $suite non-free" >&2; exit 1; }
    echo "  $p $version"
    ls "$debs/${p}_"*.deb >/dev/null 2>&1 || missing+=("$p=$version")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "toolchains.sh: $release: downloading ${missing[*]}"
    (cd "$debs" && apt-get "${apt_options[@]}" -qq download "${missing[@]}")
  fi
}

# unpack <release> <host compiler>: FOLDER/cuda-<release> from FOLDER/debs/<release>.
unpack() {
  local release=$1 ccbin=$2
  local tree="$FOLDER/cuda-$release"
  rm -rf "$tree"
  mkdir -p "$tree"
  for deb in "$FOLDER/debs/$release"/*.deb; do dpkg -x "$deb" "$tree"; done
  local bin="$tree/usr/lib/nvidia-cuda-toolkit/bin"
  [ -x "$bin/nvcc" ] || { echo "toolchains.sh: $bin/nvcc missing after unpacking" >&2; exit 1; }
  # _HERE_ is nvcc's own directory: the profile keeps working if FOLDER moves.
  rm -f "$bin/nvcc.profile"
  cat >"$bin/nvcc.profile" <<'PROFILE'
# Written by vgpu's tests/gpu/compat/toolchains.sh: this unpacked tree, not /usr.
NVVMIR_LIBRARY_DIR = $(_HERE_)/../libdevice
PATH += $(_HERE_):$(_HERE_)/../../../bin:
INCLUDES += "-I$(_HERE_)/../../../include" $(_SPACE_)
LIBRARIES =+ $(_SPACE_) "-L$(_HERE_)/../../x86_64-linux-gnu"
PROFILE
  cat >"$tree/vgpu-toolchain.env" <<ENV
# Read by tests/gpu/compat/build.sh.
CUDA_RELEASE=$release
NVCC="$bin/nvcc"
CCBIN=$ccbin
ENV
  # Smoke test: a kernel, built with the static runtime, reports the runtime it was built with.
  local probe
  probe=$(mktemp -d)
  printf '%s\n' '#include <cstdio>' '__global__ void k() {}' \
    'int main() { std::printf("%d\n", CUDART_VERSION); return 0; }' >"$probe/probe.cu"
  "$bin/nvcc" -ccbin "$ccbin" -arch=sm_90 -cudart static -o "$probe/probe" "$probe/probe.cu"
  echo "toolchains.sh: $tree: nvcc $("$bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'), CUDART_VERSION $("$probe/probe"), host compiler $ccbin"
  rm -rf "$probe"
}

fetch 11.8 bookworm
fetch 12.4 trixie
unpack 11.8 g++-11
unpack 12.4 g++-12
echo "toolchains.sh: done; build the test programs with tests/gpu/compat/build.sh $FOLDER/cuda-11.8 OUTDIR"
