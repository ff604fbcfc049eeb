"""What the end-to-end suite needs to drive a cluster: its configuration (environment), kubectl,
waiting, the overlays as an operator deploys them, and the workload pods.

The suite talks to whatever cluster KUBECONFIG names, only through kubectl and the API server
(the RBAC test makes raw HTTPS requests with a service-account token). See docs/e2e.md.
"""
import base64
import http.client
import json
import os
import shlex
import ssl
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OVERLAYS = os.path.join(REPO, "deploy", "kustomize")
NAMESPACE = "vgpu-system"  # the overlays' namespace
NODE_LABEL = "vgpu.io/node"  # the DaemonSet's nodeSelector (docs/quickstart.md)
# Where the suite mounts the simulated driver in pods (lab only).
SIM_MOUNT = "/opt/vgpu-sim"
# The simulated node: 2 GPUs of 16 GiB (vgpu-node and the test pods see the same geometry).
SIM_ENV = {"VGPU_SIM_DEVICE_COUNT": "2", "VGPU_SIM_MEMORY": "16GiB"}
SIM_GPU_UUIDS = ["GPU-5151a000-0000-4000-8000-000000000000", "GPU-5151a000-0000-4000-8000-000000000001"]


class Config:
    """The suite's settings, all from the environment (docs/e2e.md lists them)."""

    def __init__(self, environ=os.environ):
        self.kubeconfig = environ.get("KUBECONFIG", "")
        self.kubectl = environ.get("VGPU_E2E_KUBECTL", "kubectl")
        self.image = environ.get("VGPU_E2E_IMAGE", "")
        self.workload_image = environ.get("VGPU_E2E_WORKLOAD_IMAGE", "")
        self.node = environ.get("VGPU_E2E_NODE", "")
        self.simulated_driver = environ.get("VGPU_E2E_SIMULATED_DRIVER", "")
        self.restart_kubelet = environ.get("VGPU_E2E_RESTART_KUBELET", "")
        self.test_namespace = environ.get("VGPU_E2E_NAMESPACE", "vgpu-e2e")
        self.runtime_class = environ.get("VGPU_E2E_RUNTIME_CLASS", "")
        self.keep = environ.get("VGPU_E2E_KEEP", "") not in ("", "0", "false")

    def problems(self):
        out = []
        if not self.kubeconfig:
            out.append("KUBECONFIG is not set (the cluster to test)")
        elif not all(os.path.isfile(p) for p in self.kubeconfig.split(os.pathsep)):
            out.append(f"KUBECONFIG={self.kubeconfig}: no such file")
        if not self.image:
            out.append("VGPU_E2E_IMAGE is not set (the vgpu-node image the nodes can pull)")
        if not self.workload_image:
            out.append("VGPU_E2E_WORKLOAD_IMAGE is not set (an image with vgpu-example and /bin/sh)")
        if self.simulated_driver and not self.simulated_driver.startswith("/"):
            out.append(f"VGPU_E2E_SIMULATED_DRIVER={self.simulated_driver}: expected an absolute host path")
        return out

    @property
    def simulated(self):
        return bool(self.simulated_driver)


CONFIG = Config()


class KubectlError(RuntimeError):
    pass


def kubectl(*args, input=None, check=True, timeout=120):
    """Runs kubectl with the configured binary and KUBECONFIG; returns stdout (text)."""
    cmd = [CONFIG.kubectl, *args]
    proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise KubectlError(f"{shlex.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout if check else proc


def get(kind, name=None, namespace=None, check=True):
    args = ["get", kind] + ([name] if name else []) + (["-n", namespace] if namespace else []) + ["-o", "json"]
    out = kubectl(*args, check=check)
    if not check:
        return json.loads(out.stdout) if out.returncode == 0 else None
    return json.loads(out)


def create_object(obj):
    return kubectl("create", "-f", "-", input=json.dumps(obj))


def merge_patch(kind, name, patch, namespace=None):
    args = ["patch", kind, name, "--type=merge", "-p", json.dumps(patch)] + (["-n", namespace] if namespace else [])
    return kubectl(*args)


def annotations(obj):
    return (obj.get("metadata") or {}).get("annotations") or {}


def wait_until(what, timeout, probe, interval=0.5):
    """Calls probe() until it returns something truthy; returns it. Fails the test after timeout."""
    deadline = time.monotonic() + timeout
    last_error = None
    while True:
        try:
            value = probe()
            if value:
                return value
        except (KubectlError, subprocess.TimeoutExpired, KeyError, IndexError, ValueError) as e:
            last_error = e
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout}s" + (f" (last error: {last_error})" if last_error else ""))
        time.sleep(interval)


def log(message):
    print(f"  [e2e] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# the node under test

def target_node():
    """VGPU_E2E_NODE, else the only node labelled vgpu.io/node=true, else the only node."""
    if CONFIG.node:
        return CONFIG.node
    labelled = get("nodes", check=True)["items"]
    chosen = [n for n in labelled if (n["metadata"].get("labels") or {}).get(NODE_LABEL) == "true"]
    if len(chosen) == 1:
        return chosen[0]["metadata"]["name"]
    if len(labelled) == 1:
        return labelled[0]["metadata"]["name"]
    raise AssertionError("several nodes: set VGPU_E2E_NODE to the GPU node to test")


def label_node(node):
    kubectl("label", "node", node, f"{NODE_LABEL}=true", "--overwrite")


# ---------------------------------------------------------------------------------------------
# the overlays, deployed as an operator would: an overlay of one's own on top of the project's,
# setting the image (and, in the lab only, the simulated driver in place of the NVIDIA runtime).

def _sim_patch():
    env = [{"name": "VGPU_NODE_NVML_LIBRARY", "value": f"{SIM_MOUNT}/libnvidia-ml.so.1"}]
    env += [{"name": k, "value": v} for k, v in SIM_ENV.items()]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "vgpu-node"},
        "spec": {"template": {"spec": {
            "containers": [{
                "name": "vgpu-node",
                "env": env,
                "volumeMounts": [{"name": "vgpu-e2e-simulated-driver", "mountPath": SIM_MOUNT, "readOnly": True}],
            }],
            "volumes": [{"name": "vgpu-e2e-simulated-driver",
                         "hostPath": {"path": CONFIG.simulated_driver, "type": "Directory"}}],
        }}},
    }


def base_image_name():
    """The image name deploy/kustomize/base sets (its images: newName)."""
    import yaml
    with open(os.path.join(OVERLAYS, "base", "kustomization.yaml")) as f:
        images = yaml.safe_load(f)["images"]
    return next(i["newName"] for i in images if i["name"] == "vgpu-node")


class Overlay:
    """A temporary kustomization over deploy/kustomize/<mode> (kustomize v2.0.3 syntax)."""

    def __init__(self, mode, extra_env=None):
        self.mode = mode
        self.dir = tempfile.mkdtemp(prefix=f"vgpu-e2e-{mode}-")
        base = os.path.relpath(os.path.join(OVERLAYS, mode), self.dir)
        name, _, tag = CONFIG.image.rpartition(":")
        if not name or "/" in tag:  # no tag, or a registry port
            name, tag = CONFIG.image, "latest"
        # The base already rewrote the image "vgpu-node" to its own reference; an overlay on top
        # must name that reference (kustomize applies the base's images: first).
        lines = [f"namespace: {NAMESPACE}", "bases:", f"- {base}", "images:", f"- name: {base_image_name()}",
                 f"  newName: {name}", f"  newTag: {tag}"]
        patches = []
        if CONFIG.simulated:
            patches.append(("simulated-driver.json", _sim_patch()))
        if CONFIG.runtime_class:
            patches.append(("runtime-class.json", {
                "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "vgpu-node"},
                "spec": {"template": {"spec": {"runtimeClassName": CONFIG.runtime_class}}}}))
        if extra_env:
            patches.append(("extra-env.json", {
                "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "vgpu-node"},
                "spec": {"template": {"spec": {"containers": [{
                    "name": "vgpu-node", "env": [{"name": k, "value": v} for k, v in extra_env.items()]}]}}}}))
        if patches:
            lines.append("patchesStrategicMerge:")
            for file_name, patch in patches:
                with open(os.path.join(self.dir, file_name), "w") as f:
                    json.dump(patch, f, indent=1)
                lines.append(f"- {file_name}")
        with open(os.path.join(self.dir, "kustomization.yaml"), "w") as f:
            f.write("\n".join(lines) + "\n")

    def apply(self):
        log(f"kubectl apply -k {self.mode} overlay (image {CONFIG.image}{', SIMULATED GPU' if CONFIG.simulated else ''})")
        return kubectl("apply", "-k", self.dir)

    def delete(self):
        kubectl("delete", "-k", self.dir, "--ignore-not-found", "--wait=true", timeout=300)

        def gone():
            pods = get("pods", namespace=NAMESPACE, check=False)
            return not pods or not pods["items"]
        wait_until("vgpu-node pods gone", 180, gone)


def daemon_pod(node):
    """The vgpu-node pod on `node` once it is Ready (name), else None."""
    pods = get("pods", namespace=NAMESPACE, check=False)
    for pod in (pods or {}).get("items", []):
        if pod["spec"].get("nodeName") != node or pod["metadata"].get("deletionTimestamp"):
            continue
        conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
        if conditions.get("Ready") == "True":
            return pod["metadata"]["name"]
    return None


def wait_daemon_ready(node, timeout=240):
    return wait_until(f"vgpu-node Ready on {node}", timeout, lambda: daemon_pod(node))


def daemon_logs(pod):
    return kubectl("logs", "-n", NAMESPACE, pod, "-c", "vgpu-node")


def daemon_exec(pod, *command):
    return kubectl("exec", "-n", NAMESPACE, pod, "-c", "vgpu-node", "--", *command)


def daemon_metrics(daemon):
    """vgpu-node's /metrics, through the API server's proxy to the pod (the path a Prometheus in
    the cluster takes to the pod network)."""
    return kubectl("get", "--raw", f"/api/v1/namespaces/{NAMESPACE}/pods/{daemon}:9394/proxy/metrics")


def metric_values(text, name, **labels):
    """Values of the samples of `name` whose labels include `labels`."""
    out = []
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        label_text, _, value = line[len(name) + 1:].rpartition("} ")
        if all(f'{k}="{v}"' in label_text for k, v in labels.items()):
            out.append(float(value))
    return out


def ledger_dirs(daemon):
    """Container directories under the host's state dir, as vgpu-node sees them."""
    out = daemon_exec(daemon, "/bin/sh", "-c", "ls -1 /var/lib/vgpu/containers 2>/dev/null || true")
    return set(line.strip() for line in out.splitlines() if line.strip())


def daemon_log_events(pod):
    """vgpu-node's JSON log lines (log_format = json in every overlay) as dicts."""
    out = []
    for line in daemon_logs(pod).splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


# ---------------------------------------------------------------------------------------------
# workload pods

# Prints what the container got from Allocate, runs the example (the CUDA program), then stays
# up until deleted. In the lab the NVIDIA container runtime is absent: CUDA_VISIBLE_DEVICES is
# set from NVIDIA_VISIBLE_DEVICES here, which is what that runtime's device selection amounts to.
WORKLOAD_SCRIPT = r"""
set -u
if [ -n "${VGPU_E2E_SIMULATED:-}" ]; then
  echo "E2E SIMULATED GPU: vgpu's test double, mounted by the suite; not a GPU"
  export CUDA_VISIBLE_DEVICES="${NVIDIA_VISIBLE_DEVICES:-}"
fi
env | grep -E '^(CUDA_|NVIDIA_VISIBLE_DEVICES|VGPU_)' | sort | sed 's/^/E2E ENV /'
echo "E2E PRELOAD $(cat /etc/ld.so.preload 2>/dev/null || echo none)"
if grep -q libvgpu.so /proc/self/maps; then echo "E2E LIBVGPU mapped"; else echo "E2E LIBVGPU absent"; fi
for f in /usr/local/vgpu/libvgpu.so /var/lib/vgpu/container/ledger /var/lib/vgpu/board /var/lib/vgpu/vgpu.sock; do
  [ -e "$f" ] && echo "E2E FILE $f" || echo "E2E NOFILE $f"
done
EXAMPLE_ARGS
echo "E2E EXAMPLE-EXIT $?"
echo E2E READY
exec sleep 100000
"""


def workload_pod(name, resources, *, annotations=None, scheduler_name=None, containers=None, init_containers=None,
                 example_args="--chunk-mib 256 --seconds 2", env=None):
    """A pod spec whose containers run WORKLOAD_SCRIPT with `vgpu-example <example_args>`.
    `containers` / `init_containers` are lists of (container name, resource limits); the default
    is one container "main" with `resources`. Init containers run a short example and exit."""
    def container(cname, limits, example, then):
        script = WORKLOAD_SCRIPT.replace("EXAMPLE_ARGS", example).replace("exec sleep 100000", then)
        c = {
            "name": cname,
            "image": CONFIG.workload_image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["/bin/sh", "-c", script],
            "resources": {"limits": {k: str(v) for k, v in limits.items()}},
            "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
        }
        if CONFIG.simulated:
            c["env"] += [{"name": "VGPU_E2E_SIMULATED", "value": "1"},
                         {"name": "LD_LIBRARY_PATH", "value": SIM_MOUNT}]
            c["env"] += [{"name": k, "value": v} for k, v in SIM_ENV.items()]
            c["volumeMounts"] = [{"name": "vgpu-e2e-simulated-driver", "mountPath": SIM_MOUNT, "readOnly": True}]
        return c

    spec = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [container(c, l, f"vgpu-example {example_args}", "exec sleep 100000")
                       for c, l in (containers or [("main", resources)])],
    }
    if init_containers:
        spec["initContainers"] = [container(c, l, "vgpu-example --seconds 2", "exit 0")
                                  for c, l in init_containers]
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    if CONFIG.runtime_class:
        spec["runtimeClassName"] = CONFIG.runtime_class
    if CONFIG.simulated:
        spec["volumes"] = [{"name": "vgpu-e2e-simulated-driver",
                            "hostPath": {"path": CONFIG.simulated_driver, "type": "Directory"}}]
    metadata = {"name": name, "namespace": CONFIG.test_namespace, "labels": {"app.kubernetes.io/part-of": "vgpu-e2e"}}
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def unscheduled_pod(name):
    """A pod spec without resources that is never scheduled (no scheduler has its schedulerName)."""
    spec = workload_pod(name, {}, scheduler_name="vgpu-e2e-nobody")
    spec["spec"]["containers"][0].pop("resources")
    return spec


def pod(name):
    return get("pod", name, CONFIG.test_namespace)


def pod_phase(name):
    return pod(name).get("status", {}).get("phase")


def wait_pod_ready_output(name, container="main", timeout=180):
    """Waits until the container printed E2E READY; returns its log. Fails early if the pod failed."""
    def probe():
        p = pod(name)
        phase = p.get("status", {}).get("phase")
        if phase == "Failed":
            raise AssertionError(f"pod {name} failed: {p['status'].get('reason')}: {p['status'].get('message')}")
        if phase != "Running":
            return None
        out = kubectl("logs", "-n", CONFIG.test_namespace, name, "-c", container, check=False)
        return out.stdout if out.returncode == 0 and "E2E READY" in out.stdout else None
    return wait_until(f"pod {name} container {container} ran its program", timeout, probe)


def parse_workload_log(text):
    """{'env': {...}, 'preload': str, 'libvgpu': bool, 'files': set, 'total_mib': float,
    'allocated_mib': float, 'refusal': str, 'kernel_share': float, 'exit': int}"""
    out = {"env": {}, "files": set(), "missing": set()}
    for line in text.splitlines():
        if line.startswith("E2E ENV "):
            key, _, value = line[len("E2E ENV "):].partition("=")
            out["env"][key] = value
        elif line.startswith("E2E PRELOAD "):
            out["preload"] = line[len("E2E PRELOAD "):].strip()
        elif line.startswith("E2E LIBVGPU "):
            out["libvgpu"] = line.endswith("mapped")
        elif line.startswith("E2E FILE "):
            out["files"].add(line[len("E2E FILE "):])
        elif line.startswith("E2E NOFILE "):
            out["missing"].add(line[len("E2E NOFILE "):])
        elif line.startswith("E2E EXAMPLE-EXIT "):
            out["exit"] = int(line.split()[-1])
        elif line.startswith("cuMemGetInfo: total "):
            out["total_mib"] = float(line.split()[2])
        elif line.startswith("allocated "):
            # allocated N chunks of C MiB (X MiB); next chunk: REASON
            out["allocated_mib"] = float(line.split("(")[1].split()[0])
            out["refusal"] = line.rsplit("next chunk: ", 1)[1].strip()
        elif line.startswith("kernels: "):
            # kernels: 2 ms spin kernels for 3 s; over the last 2.0 s the kernels ran 600 ms: 30% of wall time
            out["kernel_share"] = float(line.rsplit("% of wall time", 1)[0].rsplit(" ", 1)[1])
    return out


def delete_pod(name, wait=True):
    kubectl("delete", "pod", name, "-n", CONFIG.test_namespace, "--ignore-not-found", f"--wait={'true' if wait else 'false'}",
            "--grace-period=1", timeout=180)


def ensure_test_namespace():
    """Creates the test namespace; waits out one that is still being deleted."""
    def settled():
        ns = get("namespace", CONFIG.test_namespace, check=False)
        return "absent" if ns is None else ("present" if not ns["metadata"].get("deletionTimestamp") else None)
    if wait_until(f"namespace {CONFIG.test_namespace} deleted", 180, settled) == "absent":
        kubectl("create", "namespace", CONFIG.test_namespace)


def delete_test_pods():
    kubectl("delete", "pods", "--all", "-n", CONFIG.test_namespace, "--grace-period=1", "--wait=true", timeout=300)


def bind_pod(name, node):
    """What a scheduler's bind does: POST pods/<name>/binding."""
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": CONFIG.test_namespace},
               "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
    return kubectl("create", "--raw", f"/api/v1/namespaces/{CONFIG.test_namespace}/pods/{name}/binding", "-f", "-",
                   input=json.dumps(binding))


def rfc3339_now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# ---------------------------------------------------------------------------------------------
# raw API access with a service account's token (RBAC through the real authorizer)

class RawApi:
    """HTTPS requests to the API server of the current kubeconfig context, with a bearer token
    (`token`) or, without one, the context's own credentials (token or client certificate).
    One kept-alive connection; not thread-safe (one RawApi per thread)."""

    def __init__(self, token=None):
        self.connection = None
        self.temp_files = []
        view = json.loads(kubectl("config", "view", "--raw", "--minify", "-o", "json"))
        cluster = view["clusters"][0]["cluster"]
        user = view["users"][0].get("user", {}) if view.get("users") else {}
        url = urllib.parse.urlsplit(cluster["server"])
        self.host, self.port, self.prefix = url.hostname, url.port or 443, url.path.rstrip("/")
        self.context = ssl.create_default_context()
        if cluster.get("certificate-authority-data"):
            self.context.load_verify_locations(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        elif cluster.get("certificate-authority"):
            self.context.load_verify_locations(cafile=cluster["certificate-authority"])
        if cluster.get("insecure-skip-tls-verify"):
            self.context.check_hostname = False
            self.context.verify_mode = ssl.CERT_NONE
        self.token = token if token is not None else user.get("token")
        if token is None and not self.token:
            cert, key = user.get("client-certificate"), user.get("client-key")
            if user.get("client-certificate-data"):
                cert = self._temp_file(base64.b64decode(user["client-certificate-data"]))
                key = self._temp_file(base64.b64decode(user["client-key-data"]))
            if not cert:
                raise AssertionError("the kubeconfig context has neither a token nor a client certificate")
            self.context.load_cert_chain(cert, key)

    def close(self):
        if self.connection is not None:
            self.connection.close()
            self.connection = None
        for path in self.temp_files:
            os.unlink(path)
        self.temp_files = []

    def __del__(self):
        self.close()

    def _temp_file(self, data):
        fd, path = tempfile.mkstemp(prefix="vgpu-e2e-cred-")
        os.write(fd, data)
        os.close(fd)
        self.temp_files.append(path)
        return path

    def request(self, method, path, body=None, content_type="application/json"):
        """(HTTP status, parsed JSON body or text)."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in (0, 1):  # a kept-alive connection the server closed is opened again once
            if self.connection is None:
                self.connection = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=30)
            try:
                self.connection.request(method, self.prefix + path, body=data, headers=headers)
                response = self.connection.getresponse()
                raw = response.read().decode()
                status = response.status
                break
            except (http.client.HTTPException, ConnectionError, ssl.SSLError):
                self.connection.close()
                self.connection = None
                if attempt:
                    raise
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw


def apiserver_counter(name, **labels):
    """Sum of an API server metric's samples whose labels include `labels` (kubectl get --raw /metrics)."""
    return sum(metric_values(kubectl("get", "--raw", "/metrics"), name, **labels), 0.0)


def service_account_token(namespace, name, seconds=600):
    """A token for the service account through the TokenRequest API."""
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
               "spec": {"expirationSeconds": seconds}}
    out = kubectl("create", "--raw", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", "-f", "-",
                  input=json.dumps(request))
    return json.loads(out)["status"]["token"]


def node_account_api():
    """A RawApi with a token of vgpu-node's service account: the API access the daemon has."""
    return RawApi(service_account_token(NAMESPACE, "vgpu-node"))


def deploy_overlay(cls, mode, extra_env=None):
    """setUpClass of a test class that runs against one overlay: the node labelled, an empty test
    namespace, the overlay applied (with extra daemon environment), vgpu-node Ready. Sets
    cls.node, cls.overlay, cls.daemon."""
    require_config(cls)
    cls.node = target_node()
    label_node(cls.node)
    ensure_test_namespace()
    delete_test_pods()
    cls.overlay = Overlay(mode, extra_env)
    cls.overlay.apply()
    cls.daemon = wait_daemon_ready(cls.node)


def remove_overlay(cls):
    """tearDownClass to deploy_overlay (nothing with VGPU_E2E_KEEP)."""
    if CONFIG.keep:
        return
    delete_test_pods()
    cls.overlay.delete()


def require_config(test_case):
    problems = CONFIG.problems()
    if problems:
        raise unittest.SkipTest("; ".join(problems))
