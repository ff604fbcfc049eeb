#!/usr/bin/env python3
"""Checks that the deployment documentation and the image follow the code (no kubectl needed).

  - every configuration key vgpu-node parses (src/node/node_config.cc) is documented in
    docs/node.md, every Kubernetes option (src/k8s/plugin_config.cc) in docs/kubernetes.md, every
    library variable the configuration parser reads (src/common/config.cc) in
    docs/configuration.md, and docs/options.md links all of them;
  - the Dockerfile's build stage runs the README's test command, the one .ci/run runs;
  - the Dockerfile installs the Debian package of every shared library build/vgpu-node and
    build/vgpu need (when they are built and dpkg is there);
  - the paths the DaemonSet uses inside the image are the ones the Dockerfile creates.
"""
import os
import re
import shutil
import subprocess
import sys

from deploy_checks import BUILD, fail, finish, read


def documented(doc, names, what):
    # docs/options.md documents what the topic documents do not (the gaps).
    text = read(doc) + read("docs/options.md")
    missing = sorted(n for n in names if "`%s`" % n not in text)
    if missing:
        fail("%s does not document %s: %s" % (doc, what, ", ".join(missing)))
    print("%s documents %d %s" % (doc, len(names) - len(missing), what))


def check_options():
    node_keys = set(re.findall(r'^\s*\{"([a-z_]+)", "[^"]*", "', read("src/node/node_config.cc"), re.M))
    plugin_keys = set(re.findall(r'key == "([a-z_]+)"', read("src/k8s/plugin_config.cc")))
    library_vars = set(re.findall(r'Read(?:One)?\("([A-Z][A-Z0-9_]+)"', read("src/common/config.cc")))
    for name, found in (("vgpu-node keys", node_keys), ("Kubernetes keys", plugin_keys), ("library variables", library_vars)):
        if len(found) < 5:
            fail("could not read the %s from the sources (found %s)" % (name, sorted(found)))
    documented("docs/node.md", node_keys, "vgpu-node keys")
    documented("docs/kubernetes.md", plugin_keys, "Kubernetes keys")
    documented("docs/configuration.md", library_vars, "library variables")
    index = read("docs/options.md")
    for link in ("configuration.md", "node.md", "kubernetes.md", "metrics.md", "vgpu --help", "install-host.sh"):
        if link not in index:
            fail("docs/options.md does not point at %s" % link)


def check_dockerfile():
    dockerfile = read("Dockerfile")
    readme = read("README.md")
    ci = read(".ci/run")
    m = re.search(r"\*\*Build and pass the tests\*\*.*?```sh\n(.*?)\n```", readme, re.S)
    if m is None:
        fail("README.md: the \"Build and pass the tests\" command block is gone")
        return
    command = m.group(1).strip()
    runs = [line[4:].strip() for line in dockerfile.splitlines() if line.startswith("RUN ")]
    if command not in runs:
        fail("Dockerfile: no RUN line is the README's test command %r (RUN lines: %r)" % (command, runs))
    if command not in ci:
        fail(".ci/run does not run the README's test command %r" % command)
    print("Dockerfile build stage runs: " + command)
    # Paths the DaemonSet uses inside the image.
    daemonset = read("deploy/kustomize/base/daemonset.yaml")
    for path in ("/opt/vgpu/install-host.sh", "/opt/vgpu/lib", "/opt/vgpu/bin/vgpu-node"):
        if path not in daemonset:
            fail("deploy/kustomize/base/daemonset.yaml no longer uses %s (update this check)" % path)
    for copy in ("/opt/vgpu/install-host.sh", "/opt/vgpu/lib/libvgpu.so", "/opt/vgpu/bin/"):
        if not re.search(r"^COPY .*%s" % re.escape(copy), dockerfile, re.M):
            fail("Dockerfile does not COPY %s, which the DaemonSet uses" % copy)


def runtime_packages():
    m = re.search(r'^ARG RUNTIME_PACKAGES="([^"]*)"', read("Dockerfile"), re.M)
    if m is None:
        fail("Dockerfile: no ARG RUNTIME_PACKAGES line")
        return set()
    return set(m.group(1).split())


def check_runtime_libraries():
    listed = runtime_packages()
    if shutil.which("dpkg") is None or shutil.which("ldd") is None:
        print("note: no dpkg/ldd here; runtime packages not checked")
        return
    for binary in ("vgpu-node", "vgpu"):
        path = os.path.join(BUILD, binary)
        if not os.access(path, os.X_OK):
            print("note: %s not built; its runtime packages not checked" % path)
            continue
        needed = re.findall(r"NEEDED.*\[(.+?)\]", subprocess.run(["readelf", "-d", path], capture_output=True,
                                                                  text=True).stdout)
        resolved = dict(re.findall(r"^\s*(\S+) => (/\S+)", subprocess.run(["ldd", path], capture_output=True,
                                                                             text=True).stdout, re.M))
        for lib in needed:
            if lib.startswith("ld-linux"):
                continue
            target = resolved.get(lib)
            if target is None:
                fail("%s: ldd does not resolve %s" % (binary, lib))
                continue
            candidates = {target, os.path.realpath(target)}
            candidates |= {c.replace("/lib/", "/usr/lib/", 1) for c in list(candidates) if c.startswith("/lib/")}
            package = None
            for c in candidates:
                out = subprocess.run(["dpkg", "-S", c], capture_output=True, text=True)
                if out.returncode == 0:
                    package = out.stdout.split(":")[0].strip()
                    break
            if package is None:
                print("note: %s: no Debian package owns %s" % (binary, target))
            elif package not in listed:
                fail("Dockerfile RUNTIME_PACKAGES lacks %s (provides %s, needed by %s)" % (package, lib, binary))
        print("%s: %d shared libraries, packages covered" % (binary, len(needed)))


def main():
    check_options()
    check_dockerfile()
    check_runtime_libraries()
    return finish("all documentation and image checks passed")


if __name__ == "__main__":
    sys.exit(main())
