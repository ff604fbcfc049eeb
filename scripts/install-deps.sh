#!/usr/bin/env bash
# Installs what building and testing vgpu needs on Debian/Ubuntu (apt-get), and checks for the
# CUDA headers (cuda.h), which come with the CUDA toolkit rather than from Debian.
# Safe to run repeatedly; uses sudo when not root.
set -euo pipefail

# python3-prometheus-client: tests parse vgpu-node's /metrics with Prometheus' own parser.
packages=(cmake ninja-build g++ make libgtest-dev python3 python3-prometheus-client)
# vgpu-node's Kubernetes device plugin (optional CMake target src/k8s): gRPC, protobuf, JSON,
# HTTPS client; openssl makes the test CA of the integration tests.
packages+=(libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler nlohmann-json3-dev
           libcurl4-openssl-dev openssl)
# tests/deploy: python3-yaml parses the rendered manifests; kubectl renders them (Debian's
# kubernetes-client; skipped when another kubectl is installed, whose /usr/bin/kubectl it would clash with).
packages+=(python3-yaml)
command -v kubectl >/dev/null 2>&1 || packages+=(kubernetes-client)
as_root=()
[ "$(id -u)" -ne 0 ] && as_root=(sudo)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  "${as_root[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

cuda_h=""
for dir in "${CUDAToolkit_ROOT:-}" "${CUDA_HOME:-}" /usr/local/cuda; do
  [ -n "$dir" ] && [ -f "$dir/include/cuda.h" ] && cuda_h="$dir/include/cuda.h" && break
done
if [ -z "$cuda_h" ]; then
  echo "install-deps: cuda.h not found. vgpu needs the CUDA toolkit headers (CUDA 12.0 or newer)," >&2
  echo "  e.g. /usr/local/cuda/include/cuda.h; set CUDAToolkit_ROOT if it lives elsewhere." >&2
  exit 1
fi
echo "install-deps: ok (CUDA headers: $cuda_h)"
