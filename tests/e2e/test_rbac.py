"""RBAC through the real authorizer: the ClusterRole the overlays render lets vgpu-node's service
account make exactly the API requests of src/k8s/api_access.h, and refuses others."""
import os
import re
import time
import unittest
import urllib.parse

import e2e_lib as e2e
from e2e_lib import CONFIG

API_ACCESS_H = os.path.join(e2e.REPO, "src", "k8s", "api_access.h")
ACCOUNT = "system:serviceaccount:vgpu-system:vgpu-node"


def code_accesses():
    """The (verb, resource) pairs of kApiAccess."""
    with open(API_ACCESS_H) as f:
        text = f.read()
    table = text.split("kApiAccess[] = {", 1)[1].split("};", 1)[0]
    return set(re.findall(r'\{"(\w+)", "([\w/]+)"\}', table))


class Rbac(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        e2e.deploy_overlay(cls, "hami")
        # A pod to read and patch; it is never scheduled (no scheduler has this name).
        e2e.create_object(e2e.unscheduled_pod("rbac-target"))
        cls.api = e2e.node_account_api()

    @classmethod
    def tearDownClass(cls):
        cls.api.close()
        e2e.remove_overlay(cls)

    def pod_path(self, suffix=""):
        return f"/api/v1/namespaces/{CONFIG.test_namespace}/pods/rbac-target{suffix}"

    def requests_for(self, verb, resource):
        """One request per (verb, resource) of the table, as vgpu-node makes it."""
        node = urllib.parse.quote(self.node)
        selector = urllib.parse.quote(f"spec.nodeName={self.node}")
        name_selector = urllib.parse.quote(f"metadata.name={self.node}")
        mark = {"metadata": {"annotations": {"vgpu.io/e2e-rbac": str(time.time())}}}
        table = {
            ("get", "nodes"): ("GET", f"/api/v1/nodes/{node}", None),
            ("watch", "nodes"): ("GET", f"/api/v1/nodes?watch=1&fieldSelector={name_selector}&timeoutSeconds=1", None),
            ("patch", "nodes"): ("PATCH", f"/api/v1/nodes/{node}", mark),
            ("get", "pods"): ("GET", self.pod_path(), None),
            ("list", "pods"): ("GET", f"/api/v1/pods?fieldSelector={selector}", None),
            ("patch", "pods"): ("PATCH", self.pod_path(), mark),
        }
        return table[(verb, resource)]

    def call(self, method, path, body=None):
        content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
        return self.api.request(method, path, body, content_type)

    def test_01_every_access_of_the_code_is_allowed(self):
        accesses = code_accesses()
        self.assertEqual(len(accesses), 6, accesses)
        for verb, resource in sorted(accesses):
            method, path, body = self.requests_for(verb, resource)
            status, answer = self.call(method, path, body)
            e2e.log(f"{verb} {resource}: {method} {path} -> {status}")
            self.assertEqual(status, 200, f"{verb} {resource}: {answer}")

    def test_02_requests_outside_the_role_are_refused(self):
        node = e2e.get("node", self.node)
        refused = [
            ("list nodes", "GET", "/api/v1/nodes", None),
            ("update a node", "PUT", f"/api/v1/nodes/{self.node}", node),
            ("patch node status", "PATCH", f"/api/v1/nodes/{self.node}/status", {"metadata": {}}),
            ("create a pod", "POST", f"/api/v1/namespaces/{CONFIG.test_namespace}/pods",
             {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "rbac-new"},
              "spec": {"containers": [{"name": "c", "image": CONFIG.workload_image}]}}),
            ("delete a pod", "DELETE", self.pod_path(), None),
            ("patch pod status", "PATCH", self.pod_path("/status"), {"metadata": {}}),
            ("bind a pod", "POST", self.pod_path("/binding"),
             {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "rbac-target"},
              "target": {"apiVersion": "v1", "kind": "Node", "name": self.node}}),
            ("watch pods", "GET", "/api/v1/pods?watch=1&timeoutSeconds=1", None),
            ("list secrets", "GET", "/api/v1/namespaces/kube-system/secrets", None),
            ("read configmaps", "GET", f"/api/v1/namespaces/{e2e.NAMESPACE}/configmaps", None),
        ]
        for what, method, path, body in refused:
            status, answer = self.call(method, path, body)
            e2e.log(f"{what}: {method} {path} -> {status}")
            self.assertEqual(status, 403, f"{what}: {answer}")
            self.assertEqual(answer.get("reason"), "Forbidden")
            self.assertIn(ACCOUNT, answer.get("message", ""))
        self.assertEqual(e2e.pod_phase("rbac-target"), "Pending", "the refused calls changed nothing")

    def test_03_the_daemon_met_no_refusal(self):
        # vgpu-node in hami mode has registered the node with the same account by now.
        e2e.wait_until("hami register annotation", 60,
                       lambda: e2e.annotations(e2e.get("node", self.node)).get("hami.io/node-nvidia-register"))
        logs = e2e.daemon_logs(self.daemon)
        for line in logs.splitlines():
            self.assertNotIn("HTTP 403", line)  # how the API client describes a refusal
            self.assertNotIn("forbidden", line.lower())


if __name__ == "__main__":
    unittest.main()
