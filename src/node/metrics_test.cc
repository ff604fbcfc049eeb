#include "node/metrics.h"

#include <gtest/gtest.h>

namespace vgpu::node {
namespace {

bool Has(const std::string& text, const std::string& line) { return text.find(line + "\n") != std::string::npos; }

MetricsSnapshot Sample() {
  MetricsSnapshot s;
  s.node = "n1";
  s.version = "0.1.0";
  s.nvml_up = true;
  GpuSample g;
  g.index = 0;
  g.uuid = "GPU-a";
  g.name = "H200";
  g.memory_total = 100;
  g.memory_used = 60;
  g.utilization = 45;
  g.processes = {{10, 20}, {11, 40}};
  s.gpus.push_back(g);
  GpuHealth h;
  h.index = 0;
  h.uuid = "GPU-a";
  h.healthy = false;
  h.xids[79] = 2;
  h.ecc_double = 1;
  h.transitions = 1;
  s.health.push_back(h);
  ContainerMetrics c;
  c.record.key = "uid1_main";
  c.record.pod_uid = "uid1";
  c.record.container_name = "main";
  c.record.ns = "team\"a";
  c.record.pod_name = "trainer";
  c.record.dir = "/var/lib/vgpu/containers/uid1_main";
  ledger::DeviceUsage d;
  d.index = 0;
  d.ordinal = 0;
  d.uuid = "GPU-a";
  d.memory_limit = 1073741824;
  d.used = 536870912;
  d.peak = 600000000;
  d.oom_refusals = 3;
  d.sm_limit = 30;
  d.share_ppm = 295000;
  d.busy_ns = 2'500'000'000;
  d.throttled_ns = 1'000'000'000;
  d.host_limit = 2147483648;
  d.spilled = 805306368;
  d.spill_peak = 1610612736;
  d.spill_refusals = 4;
  c.snapshot.devices.push_back(d);
  c.live_processes = 2;
  c.registered_processes = 1;
  c.bypass_processes = 1;
  c.nvml_memory["GPU-a"] = 40;
  s.containers.push_back(c);
  BypassFinding f;
  f.host_pid = 11;
  f.comm = "python";
  f.container_key = "uid1_main";
  f.cgroup = "/x";
  f.memory["GPU-a"] = 40;
  s.bypass.push_back(f);
  s.counters.registrations_ok = 5;
  s.counters.rejects["oversized"] = 2;
  s.counters.bypass_detections = 1;
  return s;
}

TEST(MetricsTest, HamiNamesAndLabels) {
  const std::string text = RenderMetrics(Sample());
  EXPECT_TRUE(Has(text, "hami_vgpu_memory_used_bytes{namespace=\"team\\\"a\",pod=\"trainer\",container=\"main\",vdevice_index=\"0\",device_uuid=\"GPU-a\"} 536870912")) << text;
  EXPECT_TRUE(Has(text, "hami_vgpu_memory_limit_bytes{namespace=\"team\\\"a\",pod=\"trainer\",container=\"main\",vdevice_index=\"0\",device_uuid=\"GPU-a\"} 1073741824"));
  EXPECT_TRUE(Has(text, "hami_container_device_utilization_ratio{namespace=\"team\\\"a\",pod=\"trainer\",container=\"main\",vdevice_index=\"0\",device_uuid=\"GPU-a\"} 29.5"));
  EXPECT_TRUE(Has(text, "hami_host_gpu_memory_used_bytes{node=\"n1\",device_index=\"0\",device_uuid=\"GPU-a\",device_type=\"NVIDIA-H200\"} 60"));
  EXPECT_TRUE(Has(text, "hami_host_gpu_utilization_ratio{node=\"n1\",device_index=\"0\",device_uuid=\"GPU-a\",device_type=\"NVIDIA-H200\"} 45"));
}

TEST(MetricsTest, OwnMetrics) {
  const std::string text = RenderMetrics(Sample());
  const std::string labels = "{pod_uid=\"uid1\",namespace=\"team\\\"a\",pod=\"trainer\",container=\"main\",device_index=\"0\",device_uuid=\"GPU-a\"}";
  EXPECT_TRUE(Has(text, "vgpu_container_compute_share_ratio" + labels + " 0.295"));
  EXPECT_TRUE(Has(text, "vgpu_container_compute_limit_ratio" + labels + " 0.3"));
  EXPECT_TRUE(Has(text, "vgpu_container_gpu_busy_seconds_total" + labels + " 2.5"));
  EXPECT_TRUE(Has(text, "vgpu_container_throttled_seconds_total" + labels + " 1"));
  EXPECT_TRUE(Has(text, "vgpu_container_oom_refusals_total" + labels + " 3"));
  EXPECT_TRUE(Has(text, "vgpu_container_memory_nvml_bytes" + labels + " 40"));
  EXPECT_TRUE(Has(text, "vgpu_container_memory_peak_bytes" + labels + " 600000000"));
  EXPECT_TRUE(Has(text, "vgpu_container_spill_used_bytes" + labels + " 805306368"));
  EXPECT_TRUE(Has(text, "vgpu_container_spill_limit_bytes" + labels + " 2147483648"));
  EXPECT_TRUE(Has(text, "vgpu_container_spill_peak_bytes" + labels + " 1610612736"));
  EXPECT_TRUE(Has(text, "vgpu_container_spill_refusals_total" + labels + " 4"));
  EXPECT_TRUE(Has(text, "# TYPE vgpu_container_spill_refusals_total counter"));
  EXPECT_TRUE(Has(text, "vgpu_gpu_healthy{node=\"n1\",device_index=\"0\",device_uuid=\"GPU-a\"} 0"));
  EXPECT_TRUE(Has(text, "vgpu_gpu_xid_errors_total{node=\"n1\",device_index=\"0\",device_uuid=\"GPU-a\",xid=\"79\"} 2"));
  EXPECT_TRUE(Has(text, "vgpu_gpu_ecc_errors_total{node=\"n1\",device_index=\"0\",device_uuid=\"GPU-a\",type=\"double_bit\"} 1"));
  EXPECT_TRUE(Has(text, "vgpu_gpu_processes{node=\"n1\",device_index=\"0\",device_uuid=\"GPU-a\",device_type=\"NVIDIA-H200\"} 2"));
  EXPECT_TRUE(Has(text, "vgpu_bypass_processes{node=\"n1\"} 1"));
  EXPECT_TRUE(Has(text, "vgpu_bypass_process_info{host_pid=\"11\",comm=\"python\",container=\"uid1_main\",cgroup=\"/x\"} 40"));
  EXPECT_TRUE(Has(text, "vgpu_container_bypass_processes{pod_uid=\"uid1\",namespace=\"team\\\"a\",pod=\"trainer\",container=\"main\"} 1"));
  EXPECT_TRUE(Has(text, "vgpu_registrations_total{result=\"ok\"} 5"));
  EXPECT_TRUE(Has(text, "vgpu_registration_rejects_total{reason=\"oversized\"} 2"));
  EXPECT_TRUE(Has(text, "vgpu_registration_rejects_total{reason=\"timeout\"} 0"));
  EXPECT_TRUE(Has(text, "# TYPE vgpu_registration_duration_seconds histogram"));
}

TEST(MetricsTest, EveryFamilyHasHelpAndType) {
  const std::string text = RenderMetrics(Sample());
  size_t types = 0, helps = 0;
  for (size_t at = text.find("# TYPE "); at != std::string::npos; at = text.find("# TYPE ", at + 1)) ++types;
  for (size_t at = text.find("# HELP "); at != std::string::npos; at = text.find("# HELP ", at + 1)) ++helps;
  EXPECT_EQ(types, helps);
  EXPECT_GT(types, 30u);
}

TEST(MetricsTest, AContainerWithoutALedgerHasNoDeviceSeries) {
  MetricsSnapshot s = Sample();
  s.containers[0].ledger_error = "ledger x: truncated";
  const std::string text = RenderMetrics(s);
  EXPECT_EQ(text.find("hami_vgpu_memory_used_bytes{"), std::string::npos);
  EXPECT_TRUE(Has(text, "vgpu_container_ledger_ok{pod_uid=\"uid1\",namespace=\"team\\\"a\",pod=\"trainer\",container=\"main\"} 0"));
}

TEST(MetricsTest, HistogramIsCumulative) {
  LatencyHistogram h;
  h.Observe(40'000);      // 40 us
  h.Observe(300'000);     // 300 us
  h.Observe(2'000'000);   // 2 ms
  h.Observe(1'000'000'000);  // 1 s: only in +Inf
  const LatencyHistogram::Values v = h.Read();
  EXPECT_EQ(v.cumulative[0], 1u);  // <= 50 us
  EXPECT_EQ(v.cumulative[3], 2u);  // <= 500 us
  EXPECT_EQ(v.cumulative[5], 3u);  // <= 2.5 ms
  EXPECT_EQ(v.cumulative[9], 3u);  // <= 250 ms
  EXPECT_EQ(v.count, 4u);
  EXPECT_NEAR(v.sum_seconds, 1.00234, 1e-9);
  EXPECT_EQ(EscapeLabel("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
}

}  // namespace
}  // namespace vgpu::node
