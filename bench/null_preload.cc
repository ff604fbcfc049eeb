// An empty shared library: the control for the process-level overhead ratios in
// tests/gpu/run.sh. Preloading it shows what preloading any library costs (a different memory
// layout, one more object in every symbol search), against what libvgpu.so's hooks cost.
extern "C" int vgpu_null_preload_marker() { return 0; }
