#!/usr/bin/env bash
# A real single-node Kubernetes cluster on this machine, for the end-to-end suite (docs/e2e.md).
#
#   tests/e2e/lab.sh up BIN_DIR [BUILD_DIR]   start it (BIN_DIR: kube-apiserver, kube-controller-manager,
#                                             kube-scheduler, kubelet, kube-proxy, kubectl; BUILD_DIR:
#                                             vgpu's build, default build/)
#   tests/e2e/lab.sh images [BUILD_DIR]       rebuild and import the vgpu images (after a new build)
#   tests/e2e/lab.sh env                      print the exports the suite needs (eval "$(lab.sh env)")
#   tests/e2e/lab.sh restart-kubelet          stop and start the kubelet (the suite's kubelet restart)
#   tests/e2e/lab.sh status                   which lab processes run
#   tests/e2e/lab.sh down                     stop everything and remove the lab's state
#
# What runs, all as root on this machine: etcd (Debian's etcd-server) on 127.0.0.1; the API
# server on the lab bridge's address (NODE_IP below: the `kubernetes` Service's endpoint may not
# be a loopback address, and pods reach the API server through it); controller-manager and
# scheduler on 127.0.0.1; containerd + runc (Debian's) with a configuration, root and socket of
# the lab's own; the kubelet (cgroupfs driver); kube-proxy (iptables) so that pods reach the API
# through the `kubernetes` Service, as vgpu-node's in-cluster client does; CNI bridge networking
# (Debian's containernetworking-plugins) on a bridge that exists only on this machine, with
# routes to the bridge subnet and the Service range only.
#
# Images are made without a container engine or registry: a Debian root filesystem from
# debootstrap (cached in CACHE_DIR) with the runtime packages of the Dockerfile, plus the build
# outputs, packed by lab/pack_image.py and imported with `ctr images import`:
#   docker.io/vgpu-lab/vgpu-node:e2e        the Dockerfile's runtime stage from BUILD_DIR's outputs
#   docker.io/vgpu-lab/vgpu-e2e-workload:e2e  the bundled example program (vgpu-example)
#   docker.io/vgpu-lab/pause:e2e            the pod sandbox (lab/pause.c)
# The node has no GPU. The SIMULATED driver (tests/simdriver, a test double) is copied to
# LAB_DIR/sim on the host; the suite mounts it into the test pods and into vgpu-node's pod in
# place of the NVIDIA container runtime (VGPU_E2E_SIMULATED_DRIVER). It is in no image.
set -euo pipefail

LAB_DIR=${VGPU_LAB_DIR:-/var/lib/vgpu-lab}
RUN_DIR=/run/vgpu-lab
CACHE_DIR=${VGPU_LAB_CACHE:-/var/cache/vgpu-lab}
NODE=vgpu-lab
BRIDGE=vgpulab0
NODE_IP=10.88.0.1
POD_CIDR=10.88.0.0/16
SERVICE_CIDR=10.0.0.0/24
API_SERVICE_IP=10.0.0.1
API_PORT=6443
ETCD_PORT=12379
ETCD_PEER_PORT=12380
CONTAINERD_SOCK=$RUN_DIR/containerd/containerd.sock
NODE_IMAGE=docker.io/vgpu-lab/vgpu-node:e2e
WORKLOAD_IMAGE=docker.io/vgpu-lab/vgpu-e2e-workload:e2e
PAUSE_IMAGE=docker.io/vgpu-lab/pause:e2e
# Debian packages the lab runs (installed by `up` when missing).
LAB_PACKAGES=(etcd-server containerd runc containernetworking-plugins debootstrap iptables conntrack
              openssl curl python3 gcc libc6-dev)
KUBE_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PKI=$LAB_DIR/pki
LOG_DIR=$LAB_DIR/log

say() { echo "lab: $*" >&2; }
die() { echo "lab: error: $*" >&2; exit 1; }

usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

require_root() { [ "$(id -u)" -eq 0 ] || die "must run as root (it starts a kubelet, containerd and iptables rules)"; }

# ---------------------------------------------------------------------------------------------
# processes: each daemon runs in its own session, its pid in RUN_DIR/<name>.pid, its output in
# LOG_DIR/<name>.log. Only those pids are ever signalled.

start_daemon() {  # name command...
  local name=$1; shift
  mkdir -p "$LOG_DIR" "$RUN_DIR"
  if running "$name"; then say "$name already runs (pid $(cat "$RUN_DIR/$name.pid"))"; return; fi
  echo "== $(date -u +%FT%TZ) $*" >>"$LOG_DIR/$name.log"
  setsid "$@" >>"$LOG_DIR/$name.log" 2>&1 </dev/null &
  echo $! >"$RUN_DIR/$name.pid"
  echo "$*" >"$RUN_DIR/$name.cmd"
  say "started $name (pid $!, log $LOG_DIR/$name.log)"
}

running() {  # name
  local pidfile=$RUN_DIR/$1.pid
  [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

stop_daemon() {  # name [seconds]
  local name=$1 wait_s=${2:-20} pidfile=$RUN_DIR/$1.pid
  [ -f "$pidfile" ] || return 0
  local pid; pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    local i
    for ((i = 0; i < wait_s * 10; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then say "$name did not stop in ${wait_s}s: SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; sleep 0.5; fi
    say "stopped $name (pid $pid)"
  fi
  rm -f "$pidfile"
}

wait_for() {  # description seconds command...
  local what=$1 seconds=$2; shift 2
  local i
  for ((i = 0; i < seconds * 2; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  die "$what: not ready after ${seconds}s (logs in $LOG_DIR)"
}

# ---------------------------------------------------------------------------------------------
# prerequisites

install_packages() {
  local missing=() p
  for p in "${LAB_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
}

check_binaries() {  # bin_dir
  local b
  for b in "${KUBE_BINARIES[@]}"; do
    [ -x "$1/$b" ] || die "$1/$b is missing (docs/e2e.md says how to build the Kubernetes binaries)"
  done
}

check_build() {  # build_dir
  local f
  for f in vgpu-node vgpu libvgpu.so vgpu-example sim/libcuda.so.1 sim/libnvidia-ml.so.1 sim/libvgpu-sim-core.so; do
    [ -e "$1/$f" ] || die "$1/$f is missing: build vgpu first (cmake -S . -B build -G Ninja && cmake --build build)"
  done
  "$1/vgpu-node" --help 2>/dev/null | grep -q "^  standalone " ||
    die "$1/vgpu-node was built without the Kubernetes modes (src/k8s's dependencies: scripts/install-deps.sh)"
}

# ---------------------------------------------------------------------------------------------
# certificates and kubeconfigs

make_cert() {  # name subject [subjectAltName] [extendedKeyUsage]
  local name=$1 subject=$2 san=${3:-} usage=${4:-clientAuth}
  [ -f "$PKI/$name.crt" ] && return
  local ext; ext=$(mktemp)
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$usage"
    [ -n "$san" ] && echo "subjectAltName=$san"
  } >"$ext"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI/$name.key" -subj "$subject" -out "$PKI/$name.csr" 2>/dev/null
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial -days 30 \
    -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$ext" "$PKI/$name.csr"
  chmod 600 "$PKI/$name.key"
}

make_kubeconfig() {  # name user
  cat >"$LAB_DIR/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: vgpu-lab
  cluster:
    server: https://$NODE_IP:$API_PORT
    certificate-authority: $PKI/ca.crt
users:
- name: $2
  user:
    client-certificate: $PKI/$1.crt
    client-key: $PKI/$1.key
contexts:
- name: vgpu-lab
  context: {cluster: vgpu-lab, user: $2}
current-context: vgpu-lab
EOF
}

make_pki() {
  mkdir -p "$PKI"
  chmod 700 "$PKI"
  if [ ! -f "$PKI/ca.crt" ]; then
    openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$PKI/ca.key" -subj "/CN=vgpu-lab-ca" -days 30 \
      -out "$PKI/ca.crt" 2>/dev/null
  fi
  make_cert apiserver "/CN=kube-apiserver" \
    "IP:$NODE_IP,IP:127.0.0.1,IP:$API_SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" \
    serverAuth
  make_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  make_cert admin "/O=system:masters/CN=vgpu-lab-admin"
  make_cert controller-manager "/CN=system:kube-controller-manager"
  make_cert scheduler "/CN=system:kube-scheduler"
  make_cert kubelet "/O=system:nodes/CN=system:node:$NODE"
  make_cert kube-proxy "/CN=system:kube-proxy"
  if [ ! -f "$PKI/sa.key" ]; then
    openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
    openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  fi
  make_kubeconfig admin vgpu-lab-admin
  make_kubeconfig controller-manager system:kube-controller-manager
  make_kubeconfig scheduler system:kube-scheduler
  make_kubeconfig kubelet "system:node:$NODE"
  make_kubeconfig kube-proxy system:kube-proxy
}

# ---------------------------------------------------------------------------------------------
# network: the bridge holds the node's address before the API server starts; the CNI bridge
# plugin then attaches pods to it (its gateway is the same address).

setup_network() {
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge
  fi
  ip addr show dev "$BRIDGE" | grep -q "inet $NODE_IP/" || ip addr add "$NODE_IP/16" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  mkdir -p "$LAB_DIR/cni"
  cat >"$LAB_DIR/cni/10-vgpu-lab.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "vgpu-lab",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$LAB_DIR/cni-ipam",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$NODE_IP"}]],
        "routes": [{"dst": "$SERVICE_CIDR"}]
      }
    }
  ]
}
EOF
}

teardown_network() {
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^cni-' || true); do
    # Only namespaces whose veth peer is on the lab bridge.
    if ip netns exec "$ns" ip -o addr show 2>/dev/null | grep -q "inet 10\.88\."; then ip netns delete "$ns" || true; fi
  done
  ip link show "$BRIDGE" >/dev/null 2>&1 && ip link delete "$BRIDGE" || true
}

# The KUBE-* iptables chains the kubelet and kube-proxy made (kube-proxy --cleanup leaves the
# kubelet's KUBE-FIREWALL, KUBE-MARK-* and the canaries): the jumps to them from the built-in
# chains, then the chains. Nothing but the lab's kubelet and kube-proxy makes KUBE-* chains here.
remove_kube_chains() {
  local tool table rule chain chains
  for tool in iptables ip6tables; do
    command -v "$tool" >/dev/null || continue
    for table in filter nat mangle; do
      "$tool" -t "$table" -S >/dev/null 2>&1 || continue
      "$tool" -t "$table" -S 2>/dev/null | grep -E '^-A (INPUT|OUTPUT|FORWARD|PREROUTING|POSTROUTING) .*-j KUBE-' |
        sed 's/^-A/-D/' | while read -r rule; do eval "$tool -t $table $rule" 2>/dev/null || true; done ||
        true  # grep finds no jump in a table without them: not a failure under pipefail
      # Every chain flushed before any is deleted (a chain a rule still jumps to cannot be).
      chains=$("$tool" -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}') || true
      for chain in $chains; do "$tool" -t "$table" -F "$chain" 2>/dev/null || true; done
      for chain in $chains; do "$tool" -t "$table" -X "$chain" 2>/dev/null || true; done
    done
  done
}

# ---------------------------------------------------------------------------------------------
# images

debian_mirror() {
  if [ -n "${VGPU_LAB_MIRROR:-}" ]; then echo "$VGPU_LAB_MIRROR"; return; fi
  # The mirror this machine's apt already uses for bookworm.
  apt-cache policy 2>/dev/null | awk '$3 == "bookworm/main" && $4 == "amd64" {print $2; exit}'
}

runtime_packages() {
  sed -n 's/^ARG RUNTIME_PACKAGES="\(.*\)"$/\1/p' "$REPO/Dockerfile"
}

base_rootfs() {  # prints the path of the cached base layer tar
  local packages; packages=$(runtime_packages)
  [ -n "$packages" ] || die "no ARG RUNTIME_PACKAGES line in $REPO/Dockerfile"
  local key; key=$(echo "bookworm $packages" | sha256sum | cut -c1-12)
  local tar=$CACHE_DIR/rootfs-$key.tar
  if [ ! -f "$tar" ]; then
    local mirror; mirror=$(debian_mirror)
    [ -n "$mirror" ] || die "no bookworm mirror in apt's configuration (set VGPU_LAB_MIRROR)"
    local dir=$CACHE_DIR/rootfs-$key.dir
    rm -rf "$dir"
    mkdir -p "$CACHE_DIR"
    say "debootstrap bookworm (minbase + $packages) from $mirror into $dir"
    debootstrap --variant=minbase --include="${packages// /,}" bookworm "$dir" "$mirror" >"$CACHE_DIR/debootstrap.log" 2>&1 ||
      die "debootstrap failed: $CACHE_DIR/debootstrap.log"
    rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
    tar --numeric-owner -C "$dir" --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' \
      -cf "$tar.tmp" .
    mv "$tar.tmp" "$tar"
    rm -rf "$dir"
  fi
  echo "$tar"
}

ctr_() { ctr --address "$CONTAINERD_SOCK" -n k8s.io "$@"; }

build_images() {  # build_dir
  local build=$1 base out=$LAB_DIR/images
  check_build "$build"
  base=$(base_rootfs)
  mkdir -p "$out"
  cc -static -O2 -Wall -Wextra -o "$out/pause" "$HERE/lab/pause.c"
  local path=/opt/vgpu/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  python3 "$HERE/lab/pack_image.py" --out "$out/pause.tar" --tag "$PAUSE_IMAGE" \
    --add "$out/pause:/pause:0755" --entrypoint /pause
  # The Dockerfile's runtime stage, from this machine's build outputs.
  python3 "$HERE/lab/pack_image.py" --out "$out/vgpu-node.tar" --tag "$NODE_IMAGE" --base "$base" \
    --add "$build/libvgpu.so:/opt/vgpu/lib/libvgpu.so:0755" \
    --add "$build/vgpu-node:/opt/vgpu/bin/vgpu-node:0755" \
    --add "$build/vgpu:/opt/vgpu/bin/vgpu:0755" \
    --add "$REPO/deploy/install-host.sh:/opt/vgpu/install-host.sh:0755" \
    --env "PATH=$path" --entrypoint /opt/vgpu/bin/vgpu-node
  python3 "$HERE/lab/pack_image.py" --out "$out/workload.tar" --tag "$WORKLOAD_IMAGE" --base "$base" \
    --add "$build/vgpu-example:/opt/vgpu-e2e/bin/vgpu-example:0755" \
    --env "PATH=/opt/vgpu-e2e/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
  local image
  for image in pause vgpu-node workload; do
    ctr_ images import "$out/$image.tar" >/dev/null
  done
  # The simulated driver for the test pods (never in an image).
  mkdir -p "$LAB_DIR/sim"
  cp -L "$build/sim/libcuda.so.1" "$build/sim/libnvidia-ml.so.1" "$build/sim/libvgpu-sim-core.so" "$LAB_DIR/sim/"
  ln -sf libcuda.so.1 "$LAB_DIR/sim/libcuda.so"
  ln -sf libnvidia-ml.so.1 "$LAB_DIR/sim/libnvidia-ml.so"
  say "images imported: $NODE_IMAGE $WORKLOAD_IMAGE $PAUSE_IMAGE; simulated driver in $LAB_DIR/sim"
}

# ---------------------------------------------------------------------------------------------
# components

start_etcd() {
  start_daemon etcd etcd --name "$NODE" --data-dir "$LAB_DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "$NODE=http://127.0.0.1:$ETCD_PEER_PORT" --listen-metrics-urls "" --log-level warn
  wait_for etcd 30 curl -sf "http://127.0.0.1:$ETCD_PORT/health"
}

start_apiserver() {
  local bin=$1
  start_daemon kube-apiserver "$bin/kube-apiserver" \
    --advertise-address="$NODE_IP" --bind-address="$NODE_IP" --secure-port="$API_PORT" --insecure-port=0 \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --client-ca-file="$PKI/ca.crt" --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types=InternalIP \
    --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --allow-privileged=true --profiling=false --v=1
  wait_for kube-apiserver 120 kubectl_ get --raw /readyz
}

start_controllers() {
  local bin=$1
  start_daemon kube-controller-manager "$bin/kube-controller-manager" \
    --kubeconfig="$LAB_DIR/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$LAB_DIR/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$LAB_DIR/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --port=0 --leader-elect=false --cluster-name=vgpu-lab \
    --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
    --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
    --use-service-account-credentials=true --v=1
  start_daemon kube-scheduler "$bin/kube-scheduler" \
    --kubeconfig="$LAB_DIR/scheduler.kubeconfig" \
    --authentication-kubeconfig="$LAB_DIR/scheduler.kubeconfig" \
    --authorization-kubeconfig="$LAB_DIR/scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --port=0 --leader-elect=false --v=1
}

start_containerd() {
  mkdir -p "$LAB_DIR/containerd" "$RUN_DIR/containerd"
  cat >"$LAB_DIR/containerd.toml" <<EOF
version = 2
root = "$LAB_DIR/containerd"
state = "$RUN_DIR/containerd"
[grpc]
  address = "$CONTAINERD_SOCK"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # Root in this VM lacks CAP_SYS_RESOURCE, so no process may lower its oom_score_adj below the
  # parent's; without this runc fails every pod sandbox ("failed to update
  # /proc/self/oom_score_adj: Permission denied"), and critical pods (-997) too. Negative values
  # are raised to containerd's own (docs/e2e.md).
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$LAB_DIR/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        Root = "$RUN_DIR/runc"
        SystemdCgroup = false
[plugins."io.containerd.internal.v1.opt"]
  path = "$LAB_DIR/containerd-opt"
EOF
  start_daemon containerd containerd --config "$LAB_DIR/containerd.toml"
  wait_for containerd 30 ctr --address "$CONTAINERD_SOCK" version
}

# The kubelet and kube-proxy set these kernel tunables as every Kubernetes node has them
# (vm.overcommit_memory=1, kernel.panic=10, kernel.panic_on_oops=1, bridge-nf-call-iptables=1,
# route_localnet=1, ...). `down` puts the values found before `up` back.
KERNEL_TUNABLES=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
                 kernel/keys/root_maxkeys kernel/keys/root_maxbytes net/ipv4/ip_forward
                 net/ipv4/conf/all/route_localnet net/bridge/bridge-nf-call-iptables)

save_tunables() {
  [ -f "$LAB_DIR/tunables.orig" ] && return
  local t
  for t in "${KERNEL_TUNABLES[@]}"; do
    [ -f "/proc/sys/$t" ] && echo "$t $(cat "/proc/sys/$t")"
  done >"$LAB_DIR/tunables.orig"
}

restore_tunables() {
  [ -f "$LAB_DIR/tunables.orig" ] || return 0
  local t v
  while read -r t v; do
    [ "$(cat "/proc/sys/$t")" = "$v" ] || { echo "$v" >"/proc/sys/$t" && say "restored $t = $v"; }
  done <"$LAB_DIR/tunables.orig"
}

start_kubelet() {
  local bin=$1
  save_tunables
  mkdir -p /var/lib/kubelet
  cat >"$LAB_DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
failSwapOn: false
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
serializeImagePulls: false
EOF
  start_daemon kubelet "$bin/kubelet" --config="$LAB_DIR/kubelet.yaml" --kubeconfig="$LAB_DIR/kubelet.kubeconfig" \
    --container-runtime=remote --container-runtime-endpoint="unix://$CONTAINERD_SOCK" \
    --node-ip="$NODE_IP" --hostname-override="$NODE" --root-dir=/var/lib/kubelet \
    --cert-dir="$LAB_DIR/kubelet-pki" --v=2
  wait_for kubelet 60 curl -sf http://127.0.0.1:10248/healthz
}

start_proxy() {
  local bin=$1
  start_daemon kube-proxy "$bin/kube-proxy" --kubeconfig="$LAB_DIR/kube-proxy.kubeconfig" \
    --hostname-override="$NODE" --cluster-cidr="$POD_CIDR" --proxy-mode=iptables \
    --metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=127.0.0.1:10256 \
    --conntrack-max-per-core=0 --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0 --v=1
}

kubectl_() { "$(cat "$LAB_DIR/bin_dir")/kubectl" --kubeconfig="$LAB_DIR/admin.kubeconfig" "$@"; }

node_ready() {
  [ "$(kubectl_ get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

# ---------------------------------------------------------------------------------------------
# commands

cmd_up() {
  [ $# -ge 1 ] || usage
  local bin; bin=$(cd "$1" && pwd) || die "BIN_DIR $1 does not exist"
  local build; build=$(cd "${2:-$REPO/build}" && pwd) || die "BUILD_DIR ${2:-$REPO/build} does not exist"
  require_root
  check_binaries "$bin"
  check_build "$build"
  install_packages
  mkdir -p "$LAB_DIR" "$RUN_DIR" "$LOG_DIR"
  echo "$bin" >"$LAB_DIR/bin_dir"
  echo "$build" >"$LAB_DIR/build_dir"
  make_pki
  setup_network
  start_etcd
  start_apiserver "$bin"
  start_controllers "$bin"
  start_containerd
  build_images "$build"
  start_kubelet "$bin"
  start_proxy "$bin"
  wait_for "node $NODE Ready" 120 node_ready
  say "cluster up: node $NODE Ready; versions:"
  kubectl_ version --short 2>/dev/null | sed 's/^/lab:   /' >&2 || true
  say "use it with: eval \"\$($0 env)\""
}

cmd_env() {
  [ -f "$LAB_DIR/bin_dir" ] || die "the lab is not up ($0 up BIN_DIR)"
  cat <<EOF
export KUBECONFIG=$LAB_DIR/admin.kubeconfig
export PATH=$(cat "$LAB_DIR/bin_dir"):\$PATH
export VGPU_E2E_IMAGE=$NODE_IMAGE
export VGPU_E2E_WORKLOAD_IMAGE=$WORKLOAD_IMAGE
export VGPU_E2E_NODE=$NODE
export VGPU_E2E_SIMULATED_DRIVER=$LAB_DIR/sim
export VGPU_E2E_RESTART_KUBELET="$HERE/lab.sh restart-kubelet"
EOF
}

cmd_restart_kubelet() {
  require_root
  local bin; bin=$(cat "$LAB_DIR/bin_dir")
  stop_daemon kubelet
  start_kubelet "$bin"
}

cmd_images() {
  require_root
  running containerd || die "containerd of the lab does not run ($0 up BIN_DIR first)"
  local build; build=$(cd "${1:-$(cat "$LAB_DIR/build_dir")}" && pwd)
  build_images "$build"
}

cmd_status() {
  local name
  for name in etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy; do
    if running "$name"; then echo "$name: running (pid $(cat "$RUN_DIR/$name.pid"))"; else echo "$name: not running"; fi
  done
}

cmd_down() {
  require_root
  if running kube-apiserver && running kubelet; then
    # Let the kubelet tear pods down (CNI, volumes) while it still can.
    say "deleting every workload"
    kubectl_ delete daemonsets,deployments,replicasets,jobs --all --all-namespaces --wait=false >/dev/null 2>&1 || true
    kubectl_ delete pods --all --all-namespaces --grace-period=5 --timeout=90s >/dev/null 2>&1 || true
  fi
  stop_daemon kube-proxy
  stop_daemon kubelet
  if running containerd; then
    local id
    for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true; done
    sleep 1
    for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete -f "$id" >/dev/null 2>&1 || true; done
    for id in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers delete "$id" >/dev/null 2>&1 || true; done
  fi
  stop_daemon containerd
  stop_daemon kube-scheduler
  stop_daemon kube-controller-manager
  stop_daemon kube-apiserver
  stop_daemon etcd
  if [ -f "$LAB_DIR/bin_dir" ] && [ -x "$(cat "$LAB_DIR/bin_dir")/kube-proxy" ]; then
    "$(cat "$LAB_DIR/bin_dir")/kube-proxy" --cleanup >/dev/null 2>&1 || true
  fi
  remove_kube_chains
  # Mounts the kubelet and containerd left (secret tmpfs volumes, sandbox shm, rootfs).
  local m
  for m in $(findmnt -rn -o TARGET | grep -E "^(/var/lib/kubelet|$RUN_DIR|$LAB_DIR)" | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done
  teardown_network
  restore_tunables
  rm -rf "$LAB_DIR" "$RUN_DIR" /var/lib/kubelet /var/lib/vgpu /usr/local/vgpu
  say "down: removed $LAB_DIR, $RUN_DIR, /var/lib/kubelet, /var/lib/vgpu, /usr/local/vgpu (the image cache $CACHE_DIR stays)"
}

case "${1:-}" in
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  env) cmd_env ;;
  restart-kubelet) cmd_restart_kubelet ;;
  images) shift; cmd_images "$@" ;;
  status) cmd_status ;;
  *) usage ;;
esac
