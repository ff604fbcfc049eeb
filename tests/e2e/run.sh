#!/usr/bin/env bash
# The end-to-end suite against the cluster KUBECONFIG names (docs/e2e.md). Not part of CI.
#
#   tests/e2e/run.sh                          every module: standalone, hami + volcano, RBAC
#   tests/e2e/run.sh test_standalone          one module (or Module.Class, Module.Class.test_x)
#
# Environment: KUBECONFIG, VGPU_E2E_IMAGE, VGPU_E2E_WORKLOAD_IMAGE (required);
# VGPU_E2E_NODE, VGPU_E2E_SIMULATED_DRIVER, VGPU_E2E_RESTART_KUBELET, VGPU_E2E_KUBECTL,
# VGPU_E2E_NAMESPACE, VGPU_E2E_KEEP (optional). On the lab: eval "$(tests/e2e/lab.sh env)".
set -euo pipefail
cd "$(dirname "$0")"
missing=()
for v in KUBECONFIG VGPU_E2E_IMAGE VGPU_E2E_WORKLOAD_IMAGE; do
  [ -n "${!v:-}" ] || missing+=("$v")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "run.sh: set ${missing[*]} (docs/e2e.md; on the lab: eval \"\$(tests/e2e/lab.sh env)\")" >&2
  exit 2
fi
kubectl=${VGPU_E2E_KUBECTL:-kubectl}
echo "e2e: $(date -u +%FT%TZ) cluster $("$kubectl" config current-context) ($KUBECONFIG)"
"$kubectl" version 2>/dev/null | sed 's/^/e2e: /' || true
if [ -n "${VGPU_E2E_SIMULATED_DRIVER:-}" ]; then
  echo "e2e: SIMULATED GPU: the test pods and vgpu-node load vgpu's simulated driver from ${VGPU_E2E_SIMULATED_DRIVER}"
  echo "e2e:   (tests/simdriver, a test double), not an NVIDIA driver: memory and kernel times are modelled."
fi
if [ $# -eq 0 ]; then
  set -- test_standalone test_scheduler_modes test_rbac
fi
exec python3 -m unittest -v "$@"
