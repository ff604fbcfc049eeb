#!/usr/bin/env python3
"""Renders every deploy/kustomize overlay with `kubectl kustomize` and checks it against the code.

What is checked (each a separate, named failure):
  - every overlay renders; every object parses and has apiVersion, kind, metadata.name; every
    namespaced object of the node side is in one namespace (kustomize v2.0.3 once dropped it);
  - every container of the DaemonSet uses the image of base/kustomization.yaml's `images`;
  - the ConfigMap the DaemonSet mounts exists; its node.conf names the overlay's mode, keeps the
    base keys, and uses only keys the code parses (src/node/node_config.cc, src/k8s/plugin_config.cc);
    the built vgpu-node accepts it (--print-config) when the build has it;
  - RBAC: the ClusterRole grants exactly the (verb, resource) pairs of src/k8s/api_access.h in
    the modes that use the API, and no RBAC object exists in standalone mode;
  - hostPath mounts match what Allocate hands out: state_dir, the kubelet's device plugin dir,
    the directory of library_path / preload_path (defaults in src/k8s), the host cgroup tree, in
    standalone mode the directory of the kubelet's pod resources socket; the init step writes ld.so.preload naming the container library path of src/k8s/container_grant.h;
  - scheduler sides agree with node.conf (HAMi chart values; Volcano's device ConfigMap and
    scheduler arguments);
  - docs/quickstart.md lists, per mode, exactly the objects its commands create.
Skipped (exit 77) when kubectl is not installed.
"""
import os
import re
import shutil
import subprocess
import sys

import yaml

from deploy_checks import BUILD, ROOT, fail, finish, read

KUSTOMIZE = os.path.join(ROOT, "deploy", "kustomize")
MODES = ["hami", "volcano", "standalone"]
API_MODES = {"hami", "volcano"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}


def render(directory):
    out = subprocess.run(["kubectl", "kustomize", directory], capture_output=True, text=True)
    if out.returncode != 0:
        fail("kubectl kustomize %s: %s" % (os.path.relpath(directory, ROOT), out.stderr.strip()))
        return []
    objects = [o for o in yaml.safe_load_all(out.stdout) if o is not None]
    for o in objects:
        for field in ("apiVersion", "kind"):
            if not o.get(field):
                fail("%s: an object without %s" % (directory, field))
        if not (o.get("metadata") or {}).get("name"):
            fail("%s: a %s without metadata.name" % (directory, o.get("kind")))
    return objects


def parse_conf(text):
    conf = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if not value.startswith('"') and " #" in value:
            value = value[: value.index(" #")].strip()
        conf[key.strip().replace("-", "_")] = value.strip('"')
    return conf


# --- facts from the code ------------------------------------------------------------------------
def code_facts():
    facts = {}
    node_cc = read("src/node/node_config.cc")
    facts["node_keys"] = set(re.findall(r'^\s*\{"([a-z_]+)", "[^"]*", "', node_cc, re.M))
    plugin_cc = read("src/k8s/plugin_config.cc")
    facts["plugin_keys"] = set(re.findall(r'key == "([a-z_]+)"', plugin_cc))
    plugin_h = read("src/k8s/plugin_config.h")
    for name in ("device_plugin_dir", "pod_resources_socket", "hami_resource", "volcano_number_resource", "volcano_memory_resource",
                 "volcano_cores_resource", "standalone_memory_resource", "standalone_compute_resource"):
        m = re.search(r'std::string %s = "([^"]+)"' % name, plugin_h)
        facts[name] = m.group(1) if m else None
    for name in ("split_count", "volcano_memory_factor"):
        m = re.search(r"int %s = (\d+);" % name, plugin_h)
        facts[name] = m.group(1) if m else None
    m = re.search(r"double memory_scaling = ([\d.]+);", plugin_h)
    facts["memory_scaling"] = m.group(1) if m else None
    grant_h = read("src/k8s/container_grant.h")
    for name in ("kContainerLibraryPath", "kContainerLedgerPath"):
        m = re.search(r'%s\[\] = "([^"]+)"' % name, grant_h)
        facts[name] = m.group(1) if m else None
    for name in ("state_dir", "library", "preload_file"):
        m = re.search(r'std::string %s = "([^"]+)"' % name, grant_h)
        facts["paths." + name] = m.group(1) if m else None
    node_h = read("src/node/node_config.h")
    for name in ("state_dir", "cgroup_root", "proc_root", "metrics_listen", "container_ledger_path"):
        m = re.search(r'std::string %s = "([^"]+)"' % name, node_h)
        facts["node." + name] = m.group(1) if m else None
    access_h = read("src/k8s/api_access.h")
    table = access_h[access_h.index("kApiAccess[] = {"):]
    table = table[: table.index("};")]
    facts["api_access"] = set(re.findall(r'\{"([a-z]+)", "([a-z/]+)"\}', table))
    install = read("deploy/install-host.sh")
    m = re.search(r'^preload_names="([^"]+)"', install, re.M)
    facts["install_preload_default"] = m.group(1) if m else None
    for key, value in facts.items():
        if value in (None, set()):
            fail("could not read %s from the sources (did a declaration change?)" % key)
    return facts


def base_image():
    k = yaml.safe_load(read("deploy/kustomize/base/kustomization.yaml"))
    images = k.get("images") or []
    if len(images) != 1:
        fail("base/kustomization.yaml: expected one images entry, found %d" % len(images))
        return None, None
    return images[0]["name"], "%s:%s" % (images[0]["newName"], images[0]["newTag"])


def one(objects, kind, name=None):
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    return found[0] if len(found) == 1 else None


# --- per overlay ------------------------------------------------------------------------------
def check_overlay(mode, objects, facts, image, base_conf):
    where = "overlay " + mode
    ds = one(objects, "DaemonSet", "vgpu-node")
    if ds is None:
        fail(where + ": expected one DaemonSet vgpu-node")
        return
    namespace = ds["metadata"].get("namespace")
    if not namespace:
        fail(where + ": the DaemonSet has no namespace")
    for o in objects:
        if o["kind"] not in CLUSTER_SCOPED and o["metadata"].get("namespace") != namespace:
            fail("%s: %s %s is in namespace %r, the DaemonSet in %r" % (where, o["kind"], o["metadata"]["name"],
                                                                          o["metadata"].get("namespace"), namespace))
    pod = ds["spec"]["template"]["spec"]
    containers = pod.get("containers", [])
    inits = pod.get("initContainers", [])
    for c in containers + inits:
        if c.get("image") != image:
            fail("%s: container %s uses image %r, expected %r" % (where, c["name"], c.get("image"), image))
    if pod.get("hostPID") is not True:
        fail(where + ": hostPID must be true (SO_PEERCRED host pids, /proc of other containers)")
    daemon = next((c for c in containers if c["name"] == "vgpu-node"), None)
    install = next((c for c in inits if c["name"] == "install"), None)
    if daemon is None or install is None:
        fail(where + ": expected container vgpu-node and init container install")
        return

    volumes = {v["name"]: v for v in pod.get("volumes", [])}

    def host_path_of(container, mount_path):
        for m in container.get("volumeMounts", []):
            if m["mountPath"] == mount_path:
                v = volumes.get(m["name"], {})
                return (v.get("hostPath") or {}).get("path"), m
        return None, None

    # The configuration file.
    config_mount = next((m for m in daemon.get("volumeMounts", []) if m["mountPath"] == "/etc/vgpu"), None)
    args = daemon.get("args", [])
    if "--config" not in args or args[args.index("--config") + 1] != "/etc/vgpu/node.conf" or config_mount is None:
        fail(where + ": the daemon must run with --config /etc/vgpu/node.conf from a /etc/vgpu mount")
        return
    cm_name = volumes[config_mount["name"]]["configMap"]["name"]
    cm = one(objects, "ConfigMap", cm_name)
    if cm is None or "node.conf" not in cm.get("data", {}):
        fail("%s: ConfigMap %s with node.conf is not in the output" % (where, cm_name))
        return
    conf_text = cm["data"]["node.conf"]
    conf = parse_conf(conf_text)
    if conf.get("mode") != mode:
        fail("%s: node.conf sets mode %r" % (where, conf.get("mode")))
    for key, value in base_conf.items():
        if conf.get(key) != value:
            fail("%s: node.conf has %s = %r, base/node.conf %r" % (where, key, conf.get(key), value))
    for key in conf:
        if "." in key:
            prefix, _, sub = key.partition(".")
            if prefix != mode:
                fail("%s: node.conf key %s belongs to another mode (ignored by the daemon)" % (where, key))
            elif sub not in facts["plugin_keys"]:
                fail("%s: node.conf key %s is not a Kubernetes option (src/k8s/plugin_config.cc)" % (where, key))
        elif key not in facts["node_keys"]:
            fail("%s: node.conf key %s is not a vgpu-node key (src/node/node_config.cc)" % (where, key))
    check_conf_with_daemon(where, conf_text)

    def setting(key, default):
        return conf.get(key, default)

    # hostPath mounts against what the code hands out.
    state_dir = setting("state_dir", facts["node.state_dir"])
    for container in (daemon, install):
        host, _ = host_path_of(container, state_dir)
        if host != state_dir:
            fail("%s: %s must mount host %s at the same path (Allocate hands out host paths under "
                 "state_dir); found host %r" % (where, container["name"], state_dir, host))
    plugin_dir = setting(mode + ".device_plugin_dir", facts["device_plugin_dir"])
    host, _ = host_path_of(daemon, plugin_dir)
    if host != plugin_dir:
        fail("%s: the daemon must mount host %s at the same path; found %r" % (where, plugin_dir, host))
    if mode == "standalone":
        # Which containers still hold a grant's devices (the kubelet's pod resources API).
        socket_dir = os.path.dirname(setting(mode + ".pod_resources_socket", facts["pod_resources_socket"]))
        host, _ = host_path_of(daemon, socket_dir)
        if host != socket_dir:
            fail("%s: the daemon must mount host %s (the kubelet's pod resources socket) at the same path; found %r"
                 % (where, socket_dir, host))
    library = setting(mode + ".library_path", facts["paths.library"])
    preload = setting(mode + ".preload_path", facts["paths.preload_file"])
    if os.path.dirname(library) != os.path.dirname(preload):
        fail("%s: library_path and preload_path are in different directories; the init step installs both "
             "into one" % where)
    command = install.get("command", []) + install.get("args", [])
    target = next((a.split("=", 1)[1] for a in command if a.startswith("--target=")), None)
    host, _ = host_path_of(install, target)
    if host != os.path.dirname(library):
        fail("%s: the init step installs into host %r, Allocate mounts %s and %s" % (where, host, library, preload))
    state_arg = next((a.split("=", 1)[1] for a in command if a.startswith("--state-dir=")), None)
    if host_path_of(install, state_arg)[0] != state_dir:
        fail("%s: the init step's --state-dir is not host %s" % (where, state_dir))
    names = next((a.split("=", 1)[1] for a in command if a.startswith("--preload-names=")),
                 facts["install_preload_default"])
    if names != facts["kContainerLibraryPath"]:
        fail("%s: ld.so.preload would name %r; Allocate mounts the library at %r" % (where, names,
                                                                                      facts["kContainerLibraryPath"]))
    cgroup_root = setting("cgroup_root", facts["node.cgroup_root"])
    host, mount = host_path_of(daemon, cgroup_root)
    if host != "/sys/fs/cgroup":
        fail("%s: cgroup_root %s is not the host's /sys/fs/cgroup (found %r)" % (where, cgroup_root, host))
    if setting("proc_root", facts["node.proc_root"]) != "/proc":
        fail(where + ": proc_root must be /proc (the host's, through hostPID)")
    ledger = setting("container_ledger_path", facts["node.container_ledger_path"])
    if ledger != facts["kContainerLedgerPath"]:
        fail("%s: container_ledger_path %s; the Kubernetes modes need %s" % (where, ledger, facts["kContainerLedgerPath"]))
    port = setting("metrics_listen", facts["node.metrics_listen"]).rsplit(":", 1)[-1]
    ports = {p.get("name"): p["containerPort"] for p in daemon.get("ports", [])}
    if str(ports.get("metrics")) != port:
        fail("%s: metrics_listen port %s, containerPort metrics %r" % (where, port, ports.get("metrics")))
    service = one(objects, "Service", "vgpu-node-metrics")
    if service is None or not any(p.get("targetPort") == "metrics" for p in service["spec"].get("ports", [])):
        fail(where + ": Service vgpu-node-metrics must target port metrics")
    env = {e["name"]: e for e in daemon.get("env", [])}
    if (((env.get("NODE_NAME") or {}).get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath") != "spec.nodeName":
        fail(where + ": NODE_NAME must come from spec.nodeName")

    # RBAC against the API calls.
    sa_name = pod.get("serviceAccountName")
    sa = one(objects, "ServiceAccount", sa_name)
    if sa is None:
        fail("%s: ServiceAccount %s missing" % (where, sa_name))
        return
    roles = [o for o in objects if o["kind"] in ("ClusterRole", "Role")]
    bindings = [o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    if mode in API_MODES:
        if sa.get("automountServiceAccountToken") is not True:
            fail(where + ": the API client needs the service-account token (automountServiceAccountToken: true)")
        if len(roles) != 1 or roles[0]["kind"] != "ClusterRole":
            fail(where + ": expected one ClusterRole")
            return
        granted = set()
        for rule in roles[0].get("rules", []):
            if rule.get("apiGroups") != [""]:
                fail("%s: a rule outside the core API group: %r" % (where, rule))
            for verb in rule.get("verbs", []):
                for resource in rule.get("resources", []):
                    granted.add((verb, resource))
        if granted != facts["api_access"]:
            fail("%s: ClusterRole grants %s; the code makes %s (src/k8s/api_access.h)" % (
                where, sorted(granted), sorted(facts["api_access"])))
        if len(bindings) != 1 or bindings[0]["roleRef"]["name"] != roles[0]["metadata"]["name"] or \
                bindings[0].get("subjects") != [{"kind": "ServiceAccount", "name": sa_name, "namespace": namespace}]:
            fail(where + ": the ClusterRoleBinding must bind the ClusterRole to ServiceAccount %s/%s only" % (namespace, sa_name))
    else:
        if roles or bindings:
            fail(where + ": standalone mode makes no API request; no RBAC object may be deployed")
        if sa.get("automountServiceAccountToken") is not False:
            fail(where + ": no API access: the token must not be mounted")
    return conf


def check_conf_with_daemon(where, conf_text):
    daemon = os.path.join(BUILD, "vgpu-node")
    if not os.access(daemon, os.X_OK):
        print("note: %s not built; node.conf checked against the sources only" % daemon)
        return
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".conf") as f:
        f.write(conf_text)
        f.flush()
        out = subprocess.run([daemon, "--config", f.name, "--print-config"], capture_output=True, text=True,
                             env=dict(os.environ, NODE_NAME="test-node"))
    if out.returncode != 0:
        fail("%s: vgpu-node --print-config refuses node.conf: %s" % (where, (out.stderr or out.stdout).strip()))


# --- scheduler sides ------------------------------------------------------------------------------
def same(got, want):
    try:
        return float(got) == float(want)
    except (TypeError, ValueError):
        return got == want


def check_hami_values(conf, facts):
    values = yaml.safe_load(read("deploy/kustomize/hami/hami-values.yaml"))
    plugin = values.get("devicePlugin") or {}
    if plugin.get("enabled") is not False:
        fail("hami-values.yaml: devicePlugin.enabled must be false (vgpu-node is the device plugin)")
    expect = {
        "devicePlugin.deviceSplitCount": (plugin.get("deviceSplitCount"), conf.get("hami.split_count", facts["split_count"])),
        "devicePlugin.deviceMemoryScaling": (plugin.get("deviceMemoryScaling"), conf.get("hami.memory_scaling", facts["memory_scaling"])),
        "resourceName": (values.get("resourceName"), conf.get("hami.hami_resource", facts["hami_resource"])),
    }
    for key, (got, want) in expect.items():
        if not same(got, want):
            fail("hami-values.yaml: %s = %r, node.conf says %r" % (key, got, want))


def check_volcano_scheduler(objects, conf, facts):
    sched = one(objects, "ConfigMap", "volcano-scheduler-configmap")
    device = one(objects, "ConfigMap", "volcano-vgpu-device-config")
    if sched is None or device is None:
        fail("volcano/scheduler: expected volcano-scheduler-configmap and volcano-vgpu-device-config")
        return
    if sched["metadata"].get("namespace") != "volcano-system" or device["metadata"].get("namespace") != "kube-system":
        fail("volcano/scheduler: the scheduler ConfigMap belongs in volcano-system, the device ConfigMap in kube-system")
    tiers = yaml.safe_load(sched["data"]["volcano-scheduler.conf"]).get("tiers", [])
    plugins = [p for tier in tiers for p in tier.get("plugins", [])]
    share = next((p for p in plugins if p.get("name") == "deviceshare"), None)
    if share is None or (share.get("arguments") or {}).get("deviceshare.VGPUEnable") is not True:
        fail("volcano-scheduler.conf: the deviceshare plugin needs deviceshare.VGPUEnable: true")
    nvidia = yaml.safe_load(device["data"]["device-config.yaml"]).get("nvidia", {})
    expect = {
        "deviceSplitCount": conf.get("volcano.split_count", facts["split_count"]),
        "gpuMemoryFactor": conf.get("volcano.volcano_memory_factor", facts["volcano_memory_factor"]),
        "resourceCountName": conf.get("volcano.volcano_number_resource", facts["volcano_number_resource"]),
        "resourceMemoryName": conf.get("volcano.volcano_memory_resource", facts["volcano_memory_resource"]),
        "resourceCoreName": conf.get("volcano.volcano_cores_resource", facts["volcano_cores_resource"]),
    }
    for key, want in expect.items():
        if str(nvidia.get(key)) != str(want):
            fail("volcano-vgpu-device-config: %s = %r, node.conf says %r" % (key, nvidia.get(key), want))


# --- quick start ------------------------------------------------------------------------------
def object_id(o):
    name = re.sub(r"^(vgpu-node-config)-[a-z0-9]{10}$", r"\1-<hash>", o["metadata"]["name"])
    ns = o["metadata"].get("namespace")
    return "%s %s" % (o["kind"], "%s/%s" % (ns, name) if ns else name)


# Resource names a pod may request in each mode (the scheduler side's names included).
def mode_resources(mode, conf, facts):
    if mode == "hami":
        values = yaml.safe_load(read("deploy/kustomize/hami/hami-values.yaml"))
        return {conf.get("hami.hami_resource", facts["hami_resource"]), values.get("resourceMem"),
                values.get("resourceCores"), values.get("resourceMemPercentage"), values.get("resourcePriority")}
    if mode == "volcano":
        return {conf.get("volcano." + k, facts[k]) for k in
                ("volcano_number_resource", "volcano_memory_resource", "volcano_cores_resource")}
    preset = conf.get("standalone.standalone_preset")
    if preset == "alnair":
        return {"alnair/vgpu-memory", "alnair/vgpu-compute"}
    return {conf.get("standalone.standalone_memory_resource", facts["standalone_memory_resource"]),
            conf.get("standalone.standalone_compute_resource", facts["standalone_compute_resource"])}


EXAMPLE_RESOURCES = {}


def check_example(mode, path, objects):
    allowed = EXAMPLE_RESOURCES.get(mode, set())
    for o in objects:
        for c in (o.get("spec") or {}).get("containers", []):
            requested = set(((c.get("resources") or {}).get("limits") or {}).keys())
            if not requested or not requested <= allowed:
                fail("%s: container %s requests %s; mode %s serves %s" % (path, c["name"], sorted(requested), mode,
                                                                         sorted(allowed)))


def check_quickstart(renders):
    text = read("docs/quickstart.md")
    for mode in MODES:
        m = re.search(r"<!-- objects:%s -->\n(.*?)<!-- /objects -->" % mode, text, re.S)
        s = re.search(r"^## .*\{#%s\}$(.*?)(?=^## |\Z)" % mode, text, re.S | re.M) or \
            re.search(r"^## %s\b(.*?)(?=^## |\Z)" % mode, text, re.S | re.M | re.I)
        if m is None or s is None:
            fail("docs/quickstart.md: no section or object list (<!-- objects:%s -->) for %s" % (mode, mode))
            continue
        listed = set(re.findall(r"^\s*- `([^`]+)`", m.group(1), re.M))
        applied = re.findall(r"kubectl apply -k (\S+)", s.group(1))
        expected = set()
        for path in applied:
            directory = os.path.join(ROOT, path)
            if directory not in renders:
                renders[directory] = render(directory)
            expected |= {object_id(o) for o in renders[directory]}
        if not applied:
            fail("docs/quickstart.md (%s): no `kubectl apply -k` command" % mode)
        for path in re.findall(r"kubectl apply -f (\S+)", s.group(1)):
            with open(os.path.join(ROOT, path)) as f:
                examples = [o for o in yaml.safe_load_all(f) if o]
            expected |= {object_id(o) for o in examples}
            check_example(mode, path, examples)
        if listed != expected:
            fail("docs/quickstart.md (%s): lists %s; the commands create %s (missing: %s, extra: %s)" % (
                mode, sorted(listed), sorted(expected), sorted(expected - listed), sorted(listed - expected)))


def main():
    if shutil.which("kubectl") is None:
        print("SKIP: kubectl not found (Debian: apt-get install kubernetes-client); manifests not rendered")
        return 77
    version = subprocess.run(["kubectl", "version", "--client"], capture_output=True, text=True).stdout.strip()
    print("kubectl: " + version.splitlines()[0] if version else "kubectl: version unknown")
    facts = code_facts()
    image_name, image = base_image()
    base_conf = parse_conf(read("deploy/kustomize/base/node.conf"))
    renders = {}
    for directory in ["base", "api-access", "optional/servicemonitor", "volcano/scheduler"] + MODES:
        path = os.path.join(KUSTOMIZE, directory)
        renders[path] = render(path)
        print("rendered %-24s %d objects" % (directory, len(renders[path])))
    confs = {}
    for mode in MODES:
        confs[mode] = check_overlay(mode, renders[os.path.join(KUSTOMIZE, mode)], facts, image, base_conf) or {}
    for mode in MODES:
        EXAMPLE_RESOURCES[mode] = mode_resources(mode, confs[mode], facts)
    check_hami_values(confs["hami"], facts)
    check_volcano_scheduler(renders[os.path.join(KUSTOMIZE, "volcano/scheduler")], confs["volcano"], facts)
    monitor = one(renders[os.path.join(KUSTOMIZE, "optional/servicemonitor")], "ServiceMonitor")
    service = one(renders[os.path.join(KUSTOMIZE, "hami")], "Service", "vgpu-node-metrics")
    if monitor and service:
        labels = service["metadata"].get("labels", {})
        for k, v in monitor["spec"]["selector"]["matchLabels"].items():
            if labels.get(k) != v:
                fail("ServiceMonitor selects %s=%s; the metrics Service has %r" % (k, v, labels.get(k)))
    check_quickstart(renders)
    return finish("all manifest checks passed")


if __name__ == "__main__":
    sys.exit(main())
