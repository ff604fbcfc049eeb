#!/usr/bin/env bash
# Builds the Kubernetes binaries the lab needs (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet, kube-proxy, kubectl) from Debian's source package, outside the
# repository:
#
#   tests/e2e/build-kubernetes.sh SRC_DIR BIN_DIR
#
# SRC_DIR receives the source (`apt-get source kubernetes` of Debian 12: the upstream v1.20.2
# tree with its vendor/ directory; newer Debian source packages are "+ds" and carry neither the
# server code nor vendor/), BIN_DIR the binaries. Both must be outside the repository. Go is
# Debian's golang-1.19; the build is offline (GOFLAGS=-mod=vendor GOPROXY=off) and runs under
# `nice` with two parallel jobs. docs/e2e.md has the details, including the two changes to the
# vendored tree that Go >= 1.18 needs and the generated OpenAPI file that upstream's make writes.
set -euo pipefail
[ $# -eq 2 ] || { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
REPO=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$1" "$2"
SRC=$(cd "$1" && pwd) BIN=$(cd "$2" && pwd)
case "$SRC/" in "$REPO"/*) echo "build-kubernetes: SRC_DIR must be outside the repository" >&2; exit 2 ;; esac
case "$BIN/" in "$REPO"/*) echo "build-kubernetes: BIN_DIR must be outside the repository" >&2; exit 2 ;; esac

VERSION=1.20.2
GO=/usr/lib/go-1.19/bin/go
TREE=$SRC/kubernetes-$VERSION

need=()
[ -x "$GO" ] || need+=(golang-1.19-go)
[ -d /usr/share/gocode/src/github.com/modern-go/reflect2 ] || need+=(golang-github-modern-go-reflect2-dev)
command -v dpkg-source >/dev/null || need+=(dpkg-dev)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

if [ ! -d "$TREE" ]; then
  # apt-get source needs deb-src entries for bookworm.
  if ! apt-cache showsrc kubernetes 2>/dev/null | grep -q "^Version: 1.20"; then
    echo "build-kubernetes: no source package kubernetes 1.20 known to apt; add a deb-src line for bookworm" >&2
    echo "  (e.g. 'Types: deb-src' beside bookworm's 'Types: deb' in /etc/apt/sources.list.d/) and run apt-get update" >&2
    exit 1
  fi
  (cd "$SRC" && apt-get source --download-only kubernetes)
  orig=$(ls "$SRC"/kubernetes_*really${VERSION}.orig.tar.gz)
  tar -xzf "$orig" -C "$SRC"
  [ -d "$TREE/vendor" ] || { echo "build-kubernetes: $orig has no vendor/ directory" >&2; exit 1; }

  # 1. Go 1.15 wrote vendor/modules.txt with some modules' packages after their wildcard
  #    replacement line ("# M => R"); Go >= 1.16 attributes those packages to no version and stops
  #    with "updates to go.mod needed". Move each wildcard line before the module's versioned line
  #    and its packages into that module's block (the same content, in the order Go now reads).
  python3 - "$TREE/vendor/modules.txt" <<'EOF'
import sys
path = sys.argv[1]
lines = open(path).read().split("\n")
head, blocks = [], []
for line in lines:
    if line.startswith("# "):
        blocks.append([line, []])
    elif blocks:
        blocks[-1][1].append(line)
    else:
        head.append(line)
versioned = {b[0].split()[1]: b for b in blocks if len(b[0].split()) >= 3 and b[0].split()[2] != "=>"}
out_blocks, wildcard_of = [], {}
for b in blocks:
    f = b[0].split()
    if len(f) >= 3 and f[2] == "=>" and f[1] in versioned:
        versioned[f[1]][1].extend(x for x in b[1] if x)
        wildcard_of[id(versioned[f[1]])] = b[0]
    else:
        out_blocks.append(b)
out = list(head)
for b in out_blocks:
    if id(b) in wildcard_of:
        out.append(wildcard_of[id(b)])
    out.append(b[0])
    out.extend(b[1])
open(path, "w").write("\n".join(out).rstrip("\n") + "\n")
EOF
  # 2. github.com/modern-go/reflect2 v1.0.1 (vendored) crashes at run time with Go >= 1.18; Debian's
  #    package carries v1.0.2, the release that fixed it (same API).
  rm -rf "$TREE/vendor/github.com/modern-go/reflect2"
  mkdir -p "$TREE/vendor/github.com/modern-go/reflect2"
  cp /usr/share/gocode/src/github.com/modern-go/reflect2/*.go /usr/share/gocode/src/github.com/modern-go/reflect2/*.s \
    "$TREE/vendor/github.com/modern-go/reflect2/"
fi

export GOFLAGS=-mod=vendor GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=1
export GOCACHE=$SRC/go-cache GOPATH=$SRC/go-path

# 3. The API server's OpenAPI definitions are generated at build time (upstream's `make` runs
#    openapi-gen; the source tarball does not carry pkg/generated/openapi/zz_generated.openapi.go).
#    Input: every directory with a `+k8s:openapi-gen=` tag, as build/root/Makefile.generated_files
#    finds them (staging/src named as vendor/, code-generator and sample-apiserver left out). The
#    generator's report of API rule violations must equal api/api-rules/violation_exceptions.list.
openapi=$TREE/pkg/generated/openapi/zz_generated.openapi.go
if [ ! -f "$openapi" ]; then
  echo "build-kubernetes: openapi-gen ($(date -u +%T))"
  (cd "$TREE" && nice -n 10 "$GO" build -o "$SRC/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen)
  dirs=$(cd "$TREE" && find -H . \( -not \( \( -path './_*' -o -path './.*' -o -path ./vendor \) -prune \) \) \
           -type f -name '*.go' | sed 's|^./staging/src|vendor|; s|/[^/]*$||; s|^./||' | LC_ALL=C sort -u)
  inputs=()
  for dir in $dirs; do
    case "$dir" in vendor/k8s.io/code-generator/* | vendor/k8s.io/sample-apiserver/*) continue ;; esac
    real=$TREE/$dir
    [ -d "$real" ] || real=$TREE/staging/src/${dir#vendor/}
    for f in "$real"/*.go; do
      if grep -q '^// *+k8s:' "$f" && grep -q '+k8s:openapi-gen=' "$f"; then inputs+=("k8s.io/kubernetes/$dir"); break; fi
    done
  done
  mkdir -p "$SRC/gen-path/src/k8s.io"
  ln -sfn "$TREE" "$SRC/gen-path/src/k8s.io/kubernetes"
  (cd "$SRC/gen-path/src/k8s.io/kubernetes" &&
     GO111MODULE=off GOPATH=$SRC/gen-path GOFLAGS= PATH=$(dirname "$GO"):$PATH nice -n 10 "$SRC/openapi-gen" \
       -i "$(IFS=,; echo "${inputs[*]}")" -p k8s.io/kubernetes/pkg/generated/openapi -O zz_generated.openapi \
       -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt -r "$SRC/openapi-violations.report")
  diff "$SRC/openapi-violations.report" "$TREE/api/api-rules/violation_exceptions.list" >/dev/null ||
    { echo "build-kubernetes: openapi-gen's input differs from upstream's (see $SRC/openapi-violations.report)" >&2; exit 1; }
fi
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=v$VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=20 -X $pkg.gitTreeState=clean"
  ldflags+=" -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
done
cd "$TREE"
for binary in kubectl kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
  if [ "$binary" = kubectl ]; then version=(version --client --short); else version=(--version); fi
  if [ -x "$BIN/$binary" ] && "$BIN/$binary" "${version[@]}" 2>/dev/null | grep -q "v$VERSION"; then
    echo "build-kubernetes: $BIN/$binary is v$VERSION already"
    continue
  fi
  echo "build-kubernetes: $binary ($(date -u +%T))"
  nice -n 10 "$GO" build -p 2 -trimpath -ldflags "$ldflags" -o "$BIN/$binary" "./cmd/$binary"
done
"$BIN/kubectl" version --client --short
