"""standalone overlay (Alnair resource names) against a real kubelet and the stock scheduler."""
import subprocess
import time
import unittest

import e2e_lib as e2e
from e2e_lib import CONFIG, kubectl

ORPHAN_GRACE_S = 30
MEMORY = "alnair/vgpu-memory"
COMPUTE = "alnair/vgpu-compute"


def key_of(parsed):
    return f"{parsed['env']['VGPU_POD_UID']}_{parsed['env']['VGPU_CONTAINER_NAME']}"


class Standalone(unittest.TestCase):
    """Runs in order (test_NN_*); the overlay stays deployed for the whole class."""
    running = None  # (pod name, ledger key) of the pod test_02 leaves running

    def running_pod(self):
        if not self.running:
            self.fail("needs the running pod of test_02, which failed")
        return self.running

    @classmethod
    def setUpClass(cls):
        # orphan_grace (10 min by default) is shortened so that a run can watch that it does not
        # remove a running standalone container's ledger.
        e2e.deploy_overlay(cls, "standalone", {"VGPU_NODE_ORPHAN_GRACE": f"{ORPHAN_GRACE_S}s"})

    @classmethod
    def tearDownClass(cls):
        e2e.remove_overlay(cls)

    def allocatable(self):
        return e2e.get("node", self.node)["status"].get("allocatable", {})

    def test_01_allocatable_shows_the_resources(self):
        alloc = e2e.wait_until(f"{MEMORY} and {COMPUTE} allocatable on {self.node}", 120,
                               lambda: (lambda a: a if int(a.get(MEMORY, 0)) > 0 and int(a.get(COMPUTE, 0)) > 0 else None)(
                                   self.allocatable()))
        e2e.log(f"allocatable: {MEMORY}={alloc[MEMORY]} {COMPUTE}={alloc[COMPUTE]}")
        if CONFIG.simulated:  # 2 simulated GPUs of 16 GiB
            self.assertEqual(alloc[MEMORY], "32")
            self.assertEqual(alloc[COMPUTE], "200")
        else:
            self.assertEqual(int(alloc[COMPUTE]) % 100, 0, "compute is 100 per GPU")

    def test_02_alnair_pod_gets_its_limits(self):
        pod = e2e.workload_pod("alnair-2g-50", {MEMORY: 2, COMPUTE: 50},
                               example_args="--chunk-mib 256 --seconds 4")
        e2e.create_object(pod)
        out = e2e.parse_workload_log(e2e.wait_pod_ready_output("alnair-2g-50"))
        scheduled = e2e.pod("alnair-2g-50")
        self.assertEqual(scheduled["spec"]["nodeName"], self.node)
        self.assertEqual(scheduled["spec"].get("schedulerName"), "default-scheduler")
        env = out["env"]
        self.assertEqual(env.get("CUDA_DEVICE_MEMORY_LIMIT_0"), "2048m")
        self.assertEqual(env.get("CUDA_DEVICE_SM_LIMIT_0"), "50")
        self.assertEqual(env.get("CUDA_DEVICE_MEMORY_SHARED_CACHE"), "/var/lib/vgpu/container/ledger")
        self.assertTrue(env.get("NVIDIA_VISIBLE_DEVICES", "").startswith("GPU-"), env)
        self.assertTrue(env.get("VGPU_POD_UID", "").startswith("standalone-"), env)
        self.assertNotIn("VGPU_SOCKET", env, "standalone mounts no registration socket")
        self.assertEqual(out["preload"], "/usr/local/vgpu/libvgpu.so")
        self.assertTrue(out["libvgpu"], "libvgpu.so is loaded in the container's processes")
        self.assertIn("/var/lib/vgpu/container/ledger", out["files"])
        self.assertIn("/var/lib/vgpu/vgpu.sock", out["missing"])
        self.assertEqual(out.get("exit"), 0, "the CUDA program ran")
        self.assertEqual(out["total_mib"], 2048, "cuMemGetInfo shows the limit")
        self.assertLessEqual(out["allocated_mib"], 2048)
        self.assertGreaterEqual(out["allocated_mib"], 1024, "allocation stops near the limit, not far below")
        self.assertEqual(out["refusal"], "CUDA_ERROR_OUT_OF_MEMORY")
        e2e.log(f"compute: the kernels ran {out['kernel_share']:.0f}% of wall time at a limit of 50")
        self.assertAlmostEqual(out["kernel_share"], 50, delta=10)
        # The node daemon holds the container's ledger with both limits.
        self.assertIn(key_of(out), e2e.ledger_dirs(self.daemon))
        ps = e2e.daemon_exec(self.daemon, "vgpu", "ps")
        self.assertIn(out["env"]["VGPU_POD_UID"], ps)
        type(self).running = ("alnair-2g-50", key_of(out))
        type(self).running_since = time.monotonic()

    def test_03_too_big_stays_pending(self):
        too_big = int(self.allocatable()[MEMORY]) + 1
        e2e.create_object(e2e.workload_pod("alnair-too-big", {MEMORY: too_big, COMPUTE: 10}))

        def unschedulable():
            p = e2e.pod("alnair-too-big")
            for c in p.get("status", {}).get("conditions", []):
                if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable":
                    return c.get("message", "")
            return None
        message = e2e.wait_until("the scheduler reports alnair-too-big unschedulable", 60, unschedulable)
        self.assertIn(f"Insufficient {MEMORY}", message)
        time.sleep(5)
        self.assertEqual(e2e.pod_phase("alnair-too-big"), "Pending")
        self.assertFalse(e2e.pod("alnair-too-big")["spec"].get("nodeName"))
        e2e.delete_pod("alnair-too-big")

    def test_04_vgpu_node_restart_disturbs_no_pod(self):
        name, key = self.running_pod()
        # First: the running container's ledger outlives orphan_grace (and two daemon scans).
        wait = self.running_since + ORPHAN_GRACE_S + 5 - time.monotonic()
        if wait > 0:
            e2e.log(f"waiting {wait:.0f}s: past orphan_grace with {name} running")
            time.sleep(wait)
        self.assertIn(key, e2e.ledger_dirs(self.daemon),
                      f"vgpu-node removed the ledger of the running container {key} after orphan_grace")
        before = e2e.pod(name)["status"]["containerStatuses"][0]
        old_daemon = self.daemon
        kubectl("delete", "pod", "-n", e2e.NAMESPACE, old_daemon, "--wait=true", timeout=120)
        type(self).daemon = e2e.wait_daemon_ready(self.node)
        self.assertNotEqual(self.daemon, old_daemon)
        after = e2e.pod(name)["status"]
        self.assertEqual(after["phase"], "Running")
        status = after["containerStatuses"][0]
        self.assertEqual(status["restartCount"], 0)
        self.assertEqual(status["containerID"], before["containerID"])
        self.assertIn(key, e2e.ledger_dirs(self.daemon), "the running container's ledger survives the restart")
        # The restarted daemon serves Allocate again.
        e2e.create_object(e2e.workload_pod("alnair-after-restart", {MEMORY: 1, COMPUTE: 30},
                                           example_args="--seconds 2"))
        out = e2e.parse_workload_log(e2e.wait_pod_ready_output("alnair-after-restart"))
        self.assertEqual(out["env"].get("CUDA_DEVICE_MEMORY_LIMIT_0"), "1024m")
        self.assertEqual(out["total_mib"], 1024)
        e2e.delete_pod("alnair-after-restart")

    def test_05_kubelet_restart_leads_to_reregistration(self):
        if not CONFIG.restart_kubelet:
            self.skipTest("VGPU_E2E_RESTART_KUBELET is not set (the command that restarts the kubelet on the node)")
        registrations_before = self.registrations()
        e2e.log(f"restarting the kubelet: {CONFIG.restart_kubelet}")
        subprocess.run(CONFIG.restart_kubelet, shell=True, check=True, timeout=180)
        e2e.wait_until("both resources registered again", 60,
                       lambda: self.registrations() >= registrations_before + 2)
        e2e.wait_until(f"node {self.node} Ready", 120, lambda: any(
            c["type"] == "Ready" and c["status"] == "True" for c in e2e.get("node", self.node)["status"]["conditions"]))
        name, _ = self.running_pod()
        self.assertEqual(e2e.pod(name)["status"]["containerStatuses"][0]["restartCount"], 0)
        # A pod admitted after the restart is allocated through the new registration.
        e2e.create_object(e2e.workload_pod("alnair-after-kubelet", {MEMORY: 1, COMPUTE: 20},
                                           example_args="--seconds 2"))
        out = e2e.parse_workload_log(e2e.wait_pod_ready_output("alnair-after-kubelet"))
        self.assertEqual(out["env"].get("CUDA_DEVICE_SM_LIMIT_0"), "20")
        e2e.delete_pod("alnair-after-kubelet")

    def registrations(self):
        """How often vgpu-node registered a resource with the kubelet (its log)."""
        return sum(1 for line in e2e.daemon_logs(self.daemon).splitlines() if "with the kubelet" in line and "registered" in line)

    def test_06_deleting_a_pod_frees_its_ledger(self):
        name, key = self.running_pod()
        self.assertIn(key, e2e.ledger_dirs(self.daemon))
        free_before = int(self.allocatable()[MEMORY])
        e2e.delete_pod(name)
        e2e.log(f"waiting for vgpu-node to remove {key}")
        e2e.wait_until(f"ledger directory {key} removed", 120, lambda: key not in e2e.ledger_dirs(self.daemon), interval=2)
        # Released because the kubelet's pod resources no longer list its devices.
        uid = key.rsplit("_", 1)[0]
        self.assertTrue(any(uid in line and "held by no container" in line
                            for line in e2e.daemon_logs(self.daemon).splitlines()), "released through pod resources")
        # The kubelet hands the units out again: a pod as large as the node's whole GPU fits.
        per_gpu = free_before // (2 if CONFIG.simulated else 1)
        e2e.create_object(e2e.workload_pod("alnair-whole-gpu", {MEMORY: per_gpu, COMPUTE: 100},
                                           example_args="--seconds 2"))
        out = e2e.parse_workload_log(e2e.wait_pod_ready_output("alnair-whole-gpu"))
        self.assertEqual(out["env"].get("CUDA_DEVICE_MEMORY_LIMIT_0"), f"{per_gpu * 1024}m")
        self.assertNotIn("CUDA_DEVICE_SM_LIMIT_0", out["env"], "100% is no compute limit")
        e2e.delete_pod("alnair-whole-gpu")


    def test_07_no_api_access(self):
        # standalone makes no API call: no token in the pod, and the account may not even read its node.
        out = e2e.daemon_exec(self.daemon, "/bin/sh", "-c",
                              "ls /var/run/secrets/kubernetes.io/serviceaccount 2>&1 || true")
        self.assertIn("No such file or directory", out)
        api = e2e.node_account_api()
        status, answer = api.request("GET", f"/api/v1/nodes/{self.node}")
        api.close()
        self.assertEqual(status, 403, answer)


if __name__ == "__main__":
    unittest.main()
