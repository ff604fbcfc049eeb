"""hami and volcano overlays against the real API server and kubelet.

HAMi's and Volcano's schedulers are not deployed: the suite writes what they write (the pod
annotations and the node lock, through the real API server) and binds the pod as their bind step
does; the real kubelet then calls vgpu-node's Allocate. What is checked is vgpu-node's side:
registration annotations, handshake, Allocate (environment, mounts), the annotation pop,
bind-phase and the lock release, under the real server's merge-patch and resourceVersion
semantics (a concurrent writer forces 409 Conflicts during the allocation).
"""
import json
import threading
import time
import unittest

import e2e_lib as e2e
from e2e_lib import CONFIG


class SchedulerMode:
    """Shared flow; subclasses name the protocol."""
    mode = None
    scheduler_name = None
    register_annotation = None
    handshake_annotation = None
    lock_annotation = None
    devices_annotation = None
    node_annotation = None
    bind_phase = None

    @classmethod
    def setUpClass(cls):
        e2e.deploy_overlay(cls, cls.mode)

    @classmethod
    def tearDownClass(cls):
        if not CONFIG.keep and hasattr(cls, "node"):
            # A lock a failed test left behind would block the next scheduler run on the node.
            stale = {k: None for k in e2e.annotations(e2e.get("node", cls.node)) if k == cls.lock_annotation}
            if stale:
                e2e.merge_patch("node", cls.node, {"metadata": {"annotations": stale}})
        e2e.remove_overlay(cls)

    # -- helpers --------------------------------------------------------------------------------

    def node_annotations(self):
        return e2e.annotations(e2e.get("node", self.node))

    def gpus(self):
        """[(uuid, memory as registered)] from the node's register annotation."""
        raise NotImplementedError

    def lock_value(self, pod_name):
        raise NotImplementedError

    def take_lock(self, pod_name):
        """The scheduler's node lock: a guarded update, read again and retried on 409 (the kubelet
        and vgpu-node update the node all the time), as the schedulers' node locks do."""
        for _ in range(10):
            node = e2e.get("node", self.node)
            self.assertNotIn(self.lock_annotation, e2e.annotations(node), "node lock already taken")
            patch = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"],
                                  "annotations": {self.lock_annotation: self.lock_value(pod_name)}}}
            try:
                e2e.merge_patch("node", self.node, patch)
                return
            except e2e.KubectlError as error:
                if "Conflict" not in str(error):
                    raise
        self.fail(f"node {self.node}: the lock conflicted ten times")

    def schedule(self, pod_name, devices, extra_annotations=None):
        """What the scheduler writes before binding, then the binding."""
        self.take_lock(pod_name)
        note = {self.node_annotation: self.node, self.devices_annotation: devices, self.bind_phase: "allocating"}
        note.update(extra_annotations or {})
        e2e.merge_patch("pod", pod_name, {"metadata": {"annotations": note}}, namespace=CONFIG.test_namespace)
        e2e.bind_pod(pod_name, self.node)

    def wait_bind_phase(self, pod_name, timeout=120):
        return e2e.wait_until(f"{self.bind_phase} of {pod_name} leaves allocating", timeout,
                              lambda: (lambda v: v if v not in (None, "allocating") else None)(
                                  e2e.annotations(e2e.pod(pod_name)).get(self.bind_phase)))

    def remaining_devices(self, value):
        """The entries of a devices annotation (both protocols separate them with ';')."""
        return [entry for entry in value.split(";") if entry]

    # -- tests ----------------------------------------------------------------------------------

    def test_01_node_registration(self):
        value = e2e.wait_until(f"{self.register_annotation} on {self.node}", 60,
                               lambda: self.node_annotations().get(self.register_annotation))
        e2e.log(f"{self.register_annotation}: {value}")
        gpus = self.gpus()
        self.assertGreater(len(gpus), 0)
        if CONFIG.simulated:
            self.assertEqual([uuid for uuid, _ in gpus], e2e.SIM_GPU_UUIDS)
        handshake = self.node_annotations().get(self.handshake_annotation, "")
        self.assertTrue(handshake.startswith("Reported "), handshake)

    def test_02_handshake_request_is_answered(self):
        request = "Requesting_" + time.strftime("%Y.%m.%d %H:%M:%S", time.gmtime())
        e2e.merge_patch("node", self.node, {"metadata": {"annotations": {self.handshake_annotation: request}}})
        answered = e2e.wait_until("vgpu-node answers the handshake request", 30, lambda: (
            lambda v: v if v.startswith("Reported ") else None)(self.node_annotations().get(self.handshake_annotation, "")))
        e2e.log(f"{self.handshake_annotation}: {answered}")

    def allocate_under_writes(self, name, uuid):
        """Schedules pod `name` (3000 MiB, 30%) while a writer bumps the pod's resourceVersion as
        fast as one kept-alive connection allows, so the daemon's guarded pop (a merge patch with
        the resourceVersion it read) may meet a 409 Conflict from the real server and must read
        again and retry. The writer's patches carry no resourceVersion: every 409 on PATCH pods in
        the API server's counter is one the daemon met. Returns (bind phase, conflicts)."""
        e2e.create_object(self.pod_spec(name, 1))
        conflicts_before = e2e.apiserver_counter("apiserver_request_total", code="409", resource="pods", verb="PATCH")
        stop = threading.Event()
        writes = [0]

        def writer():
            api = e2e.RawApi()
            path = f"/api/v1/namespaces/{CONFIG.test_namespace}/pods/{name}"
            while not stop.is_set():
                status, _ = api.request("PATCH", path, {"metadata": {"labels": {"vgpu-e2e/tick": str(writes[0])}}},
                                        "application/merge-patch+json")
                if status == 200:
                    writes[0] += 1
            api.close()
        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        try:
            self.schedule(name, self.device_entry(uuid, 3000, 30, containers=1))
            phase = self.wait_bind_phase(name)
        finally:
            stop.set()
            thread.join(10)
        conflicts = e2e.apiserver_counter("apiserver_request_total", code="409", resource="pods",
                                          verb="PATCH") - conflicts_before
        e2e.log(f"{name}: {writes[0]} concurrent label writes; {conflicts:.0f} HTTP 409 on PATCH pods (the daemon's retries)")
        return phase, conflicts

    def test_03_allocate_under_concurrent_writes(self):
        # Whether a write lands between the daemon's read and its pop is timing (the window is a
        # few milliseconds): the 409s met are counted, not required; test_06 checks the semantics
        # the pop relies on. Whatever happened, the allocation must be right and happen once.
        uuid = self.gpus()[0][0]
        name = f"{self.mode}-one"
        phase, conflicts = self.allocate_under_writes(name, uuid)
        if phase != "success":
            status = e2e.pod(name).get("status", {})
            self.fail(f"{name}: bind-phase {phase}; pod {status.get('phase')} {status.get('reason')}: "
                      f"{status.get('message')}\nvgpu-node: " + "\n".join(e2e.daemon_logs(self.daemon).splitlines()[-15:]))
        self.check_allocated(name, uuid)

    def check_allocated(self, name, uuid):
        """The container of pod `name` got 3000 MiB / 30% on `uuid`, registered, shows in the
        metrics; its annotations and the lock are cleaned up; deleting it removes its ledger."""
        out = e2e.parse_workload_log(e2e.wait_pod_ready_output(name))
        env = out["env"]
        self.assertEqual(env.get("NVIDIA_VISIBLE_DEVICES"), uuid)
        self.assertEqual(env.get("CUDA_DEVICE_MEMORY_LIMIT_0"), f"{self.expected_mib(3000)}m")
        self.assertEqual(env.get("CUDA_DEVICE_SM_LIMIT_0"), "30")
        self.assertEqual(env.get("VGPU_SOCKET"), "/var/lib/vgpu/vgpu.sock")
        self.assertIn("/var/lib/vgpu/vgpu.sock", out["files"])
        self.assertEqual(out["preload"], "/usr/local/vgpu/libvgpu.so")
        self.assertTrue(out["libvgpu"])
        self.assertEqual(out.get("exit"), 0)
        self.assertEqual(out["total_mib"], self.expected_mib(3000))
        self.assertEqual(out["refusal"], "CUDA_ERROR_OUT_OF_MEMORY")
        notes = e2e.annotations(e2e.pod(name))
        self.assertEqual(self.remaining_devices(notes[self.devices_annotation]), [], notes[self.devices_annotation])
        self.assertNotIn(self.lock_annotation, self.node_annotations(), "the node lock is released")
        self.assertEqual(env.get("VGPU_POD_UID"), e2e.pod(name)["metadata"]["uid"])
        # The container registered with vgpu-node (its cgroup checked against the pod), and the
        # ledger directory goes with the pod.
        key = f"{env['VGPU_POD_UID']}_main"
        self.assertIn(key, e2e.ledger_dirs(self.daemon))
        registered = [e for e in e2e.daemon_log_events(self.daemon)
                      if e.get("msg") == "registered" and e.get("container") == key]
        self.assertTrue(registered, "the CUDA program registered with vgpu-node")
        metrics = e2e.daemon_metrics(self.daemon)
        self.assertEqual(e2e.metric_values(metrics, "vgpu_container_memory_limit_bytes", pod=name),
                         [self.expected_mib(3000) * 1024 * 1024])
        self.assertGreaterEqual(sum(e2e.metric_values(metrics, "vgpu_container_oom_refusals_total", pod=name)), 1)
        e2e.delete_pod(name)
        e2e.wait_until(f"ledger directory {key} removed", 60, lambda: key not in e2e.ledger_dirs(self.daemon), interval=2)

    def test_04_malformed_annotation_fails_the_pod_and_releases_the_lock(self):
        uuid = self.gpus()[0][0]
        name = f"{self.mode}-broken"
        e2e.create_object(self.pod_spec(name, 1))
        self.schedule(name, self.device_entry(uuid, "ten-gigs", 30, containers=1))
        self.assertEqual(self.wait_bind_phase(name), "failed")
        failed = e2e.wait_until(f"{name} Failed", 60, lambda: (lambda p: p if p["status"].get("phase") == "Failed" else None)(
            e2e.pod(name)))
        e2e.log(f"{name}: {failed['status'].get('reason')}: {failed['status'].get('message')}")
        self.assertEqual(failed["status"].get("reason"), "UnexpectedAdmissionError")
        self.assertIn("is malformed", failed["status"].get("message", ""))
        self.assertNotIn(self.lock_annotation, self.node_annotations())
        e2e.delete_pod(name)


    def test_06_a_stale_guarded_patch_is_refused(self):
        # What the pop and the lock release rely on, as vgpu-node sends them (merge patch with
        # metadata.resourceVersion, with its service account's token): the real server refuses a
        # patch whose resourceVersion is no longer current (409, nothing written) and applies the
        # current one.
        name = f"{self.mode}-guard"
        e2e.create_object(e2e.unscheduled_pod(name))
        api = e2e.node_account_api()
        path = f"/api/v1/namespaces/{CONFIG.test_namespace}/pods/{name}"
        try:
            status, first = api.request("GET", path)
            self.assertEqual(status, 200, first)
            stale = first["metadata"]["resourceVersion"]
            e2e.merge_patch("pod", name, {"metadata": {"labels": {"vgpu-e2e/other": "writer"}}},
                            namespace=CONFIG.test_namespace)
            status, answer = api.request("PATCH", path, {"metadata": {"resourceVersion": stale,
                                                                      "annotations": {self.devices_annotation: "popped"}}},
                                         "application/merge-patch+json")
            self.assertEqual(status, 409, answer)
            self.assertEqual(answer.get("reason"), "Conflict")
            self.assertNotIn(self.devices_annotation, e2e.annotations(e2e.pod(name)))
            current = e2e.pod(name)["metadata"]["resourceVersion"]
            status, answer = api.request("PATCH", path, {"metadata": {"resourceVersion": current,
                                                                      "annotations": {self.devices_annotation: "popped"}}},
                                         "application/merge-patch+json")
            self.assertEqual(status, 200, answer)
            self.assertEqual(e2e.annotations(e2e.pod(name)).get(self.devices_annotation), "popped")
            self.assertEqual(e2e.pod(name)["metadata"]["labels"].get("vgpu-e2e/other"), "writer",
                             "a merge patch keeps what it does not name")
        finally:
            api.close()
            e2e.delete_pod(name)


class Hami(SchedulerMode, unittest.TestCase):
    mode = "hami"
    scheduler_name = "hami-scheduler"
    register_annotation = "hami.io/node-nvidia-register"
    handshake_annotation = "hami.io/node-handshake"
    lock_annotation = "hami.io/mutex.lock"
    devices_annotation = "hami.io/vgpu-devices-to-allocate"
    node_annotation = "hami.io/vgpu-node"
    bind_phase = "hami.io/bind-phase"
    resource = "nvidia.com/gpu"

    def gpus(self):
        entries = json.loads(self.node_annotations()[self.register_annotation])
        for entry in entries:
            self.assertEqual(entry.get("mode"), "hami-core")
            self.assertTrue(entry.get("type", "").startswith("NVIDIA-"))
            self.assertEqual(entry.get("devcore"), 100)
            self.assertTrue(entry.get("health"))
        return [(entry["id"], entry["devmem"]) for entry in entries]

    def lock_value(self, pod_name):
        return f"{e2e.rfc3339_now()},{CONFIG.test_namespace},{pod_name}"

    def pod_spec(self, name, gpus, containers=None, init_containers=None):
        return e2e.workload_pod(name, {self.resource: gpus}, scheduler_name=self.scheduler_name,
                                containers=containers, init_containers=init_containers)

    def device_entry(self, uuid, memory, cores, containers):
        return "".join(f"{uuid},NVIDIA,{memory},{cores}:;" for _ in range(containers))

    def expected_mib(self, memory):
        return memory

    def test_05_containers_take_their_entries_in_order(self):
        uuids = [uuid for uuid, _ in self.gpus()]
        second = uuids[1] if len(uuids) > 1 else uuids[0]
        name = "hami-three"
        spec = self.pod_spec(name, 1, containers=[("first", {self.resource: 1}), ("second", {self.resource: 1})],
                             init_containers=[("setup", {self.resource: 1})])
        e2e.create_object(spec)
        # Init containers first, then containers, each terminated by ';' (HAMi's encoding).
        devices = f"{uuids[0]},NVIDIA,1000,10:;{uuids[0]},NVIDIA,1500,20:;{second},NVIDIA,2500,40:;"
        self.schedule(name, devices)
        self.assertEqual(self.wait_bind_phase(name), "success")
        first = e2e.parse_workload_log(e2e.wait_pod_ready_output(name, "first"))
        second_out = e2e.parse_workload_log(e2e.wait_pod_ready_output(name, "second"))
        setup = e2e.parse_workload_log(e2e.kubectl("logs", "-n", CONFIG.test_namespace, name, "-c", "setup"))
        self.assertEqual(setup["env"].get("CUDA_DEVICE_MEMORY_LIMIT_0"), "1000m")
        self.assertEqual(first["env"].get("CUDA_DEVICE_MEMORY_LIMIT_0"), "1500m")
        self.assertEqual(first["env"].get("CUDA_DEVICE_SM_LIMIT_0"), "20")
        self.assertEqual(second_out["env"].get("NVIDIA_VISIBLE_DEVICES"), second)
        self.assertEqual(second_out["env"].get("CUDA_DEVICE_MEMORY_LIMIT_0"), "2500m")
        self.assertEqual(second_out["total_mib"], 2500)
        self.assertEqual(self.remaining_devices(e2e.annotations(e2e.pod(name))[self.devices_annotation]), [])
        e2e.delete_pod(name)


class Volcano(SchedulerMode, unittest.TestCase):
    mode = "volcano"
    scheduler_name = "volcano"
    register_annotation = "volcano.sh/node-vgpu-register"
    handshake_annotation = "volcano.sh/node-vgpu-handshake"
    lock_annotation = "hamivgpu"
    devices_annotation = "volcano.sh/devices-to-allocate"
    node_annotation = "volcano.sh/vgpu-node"
    bind_phase = "volcano.sh/bind-phase"
    memory_factor = 64  # volcano/node.conf

    def gpus(self):
        value = self.node_annotations()[self.register_annotation]
        out = []
        for entry in filter(None, value.split(":")):
            uuid, count, memory, kind, healthy, mode = entry.split(",")
            self.assertEqual(mode, "hami-core")
            self.assertTrue(kind.startswith("NVIDIA-"))
            self.assertEqual(healthy, "true")
            self.assertEqual(int(count), 10)
            out.append((uuid, int(memory)))
        return out

    def lock_value(self, pod_name):
        return e2e.rfc3339_now()

    def pod_spec(self, name, gpus, containers=None, init_containers=None):
        return e2e.workload_pod(name, {"volcano.sh/vgpu-number": gpus, "volcano.sh/vgpu-memory": 47,
                                       "volcano.sh/vgpu-cores": 30},
                                scheduler_name=self.scheduler_name, containers=containers,
                                annotations={"volcano.sh/vgpu-time": str(int(time.time()))})

    def device_entry(self, uuid, memory, cores, containers):
        # memory: MiB in the tests; Volcano writes units of gpuMemoryFactor MiB.
        units = memory if isinstance(memory, str) else -(-memory // self.memory_factor)
        return ";".join(f"{uuid},NVIDIA,{units},{cores}:" for _ in range(containers))

    def expected_mib(self, memory):
        return -(-memory // self.memory_factor) * self.memory_factor

    def test_05_allocatable_lists_the_three_resources(self):
        gpus = self.gpus()
        # The kubelet reports a new plugin's resources with its next node status update.
        alloc = e2e.wait_until("volcano's resources allocatable", 60, lambda: (
            lambda a: a if int(a.get("volcano.sh/vgpu-number", 0)) > 0 else None)(
                e2e.get("node", self.node)["status"]["allocatable"]))
        e2e.log("allocatable: " + ", ".join(f"{k}={v}" for k, v in alloc.items() if k.startswith("volcano.sh/")))
        self.assertEqual(int(alloc.get("volcano.sh/vgpu-number", 0)), 10 * len(gpus))
        self.assertEqual(int(alloc.get("volcano.sh/vgpu-cores", 0)), 100 * len(gpus))
        self.assertEqual(int(alloc.get("volcano.sh/vgpu-memory", 0)), sum(memory for _, memory in gpus))


if __name__ == "__main__":
    unittest.main()
