// Self-test of the simulated driver (TEST DOUBLE ONLY): links the simulated libcuda.so.1 and
// libnvidia-ml.so.1 directly and checks the behaviour the rest of the project relies on.
// Phase-2 features (pools, VMM, arrays, graphs) are in sim_selftest_phase2.cc.
//
// Usage: sim_selftest                 run everything (spawns copies of itself as other processes)
//        sim_selftest child <mode>... internal: one of the child roles below
#include "sim_selftest.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sys/mman.h>

#include <atomic>
#include <cstring>
#include <set>
#include <thread>

#include "sim_state.h"

extern char** environ;

namespace simtest {

uint64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t FreeBytes() {
  size_t free_bytes = 0, total = 0;
  SIM_OK(cuMemGetInfo(&free_bytes, &total));
  return free_bytes;
}

uint64_t NvmlProcessBytes(unsigned index, int pid) {
  nvmlDevice_t device = nullptr;
  SIM_NVML_OK(nvmlDeviceGetHandleByIndex_v2(index, &device));
  nvmlProcessInfo_t infos[64];
  unsigned count = 64;
  SIM_NVML_OK(nvmlDeviceGetComputeRunningProcesses_v3(device, &count, infos));
  for (unsigned i = 0; i < count; ++i) {
    if (static_cast<int>(infos[i].pid) == pid) return infos[i].usedGpuMemory;
  }
  return 0;
}

int Spawn(const std::vector<std::string>& args, const std::vector<std::string>& env, int* stdout_fd, int keep_fd) {
  std::vector<std::string> argv_storage = {"/proc/self/exe", "child"};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_storage(env);
  for (char** e = environ; *e != nullptr; ++e) env_storage.emplace_back(*e);  // extras first win
  std::vector<char*> envp;
  for (auto& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  int pipe_fds[2] = {-1, -1};
  if (stdout_fd != nullptr) {
    SIM_CHECK(pipe2(pipe_fds, O_CLOEXEC) == 0);
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  }
  if (keep_fd >= 0) posix_spawn_file_actions_adddup2(&actions, keep_fd, 3);
  pid_t pid = -1;
  SIM_CHECK(posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), envp.data()) == 0);
  posix_spawn_file_actions_destroy(&actions);
  if (stdout_fd != nullptr) {
    close(pipe_fds[1]);
    *stdout_fd = pipe_fds[0];
  }
  return pid;
}

int Wait(int pid) {
  int status = 0;
  SIM_CHECK(waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string ReadLine(int fd) {
  std::string line;
  char c = 0;
  while (read(fd, &c, 1) == 1 && c != '\n') line.push_back(c);
  return line;
}

void LaunchSleep(CUfunction sleep_fn, CUstream stream, uint64_t ns) {
  void* params[] = {&ns};
  SIM_OK(cuLaunchKernel(sleep_fn, 1, 1, 1, 32, 1, 1, 0, stream, params, nullptr));
}

}  // namespace simtest

using namespace simtest;

namespace {

CUcontext RetainPrimary(CUdevice dev) {
  CUcontext ctx = nullptr;
  SIM_OK(cuDevicePrimaryCtxRetain(&ctx, dev));
  SIM_OK(cuCtxSetCurrent(ctx));
  return ctx;
}

// --- child roles ---------------------------------------------------------------------------

// Allocates, reports its view of free memory, then waits to be killed.
int ChildHold(uint64_t mib) {
  SIM_OK(cuInit(0));
  RetainPrimary(0);
  CUdeviceptr p = 0;
  SIM_OK(cuMemAlloc(&p, mib * kMiB));
  std::printf("%llu\n", static_cast<unsigned long long>(FreeBytes()));
  std::fflush(stdout);
  for (;;) pause();
}

// Allocates and exits without freeing anything.
int ChildLeak(uint64_t mib) {
  SIM_OK(cuInit(0));
  RetainPrimary(0);
  CUdeviceptr p = 0;
  SIM_OK(cuMemAlloc(&p, mib * kMiB));
  return 0;
}

// CUDA_VISIBLE_DEVICES is set by the parent; checks ordinals map to the expected physical devices.
int ChildVisible(const std::vector<std::string>& args) {
  SIM_OK(cuInit(0));
  int count = 0;
  SIM_OK(cuDeviceGetCount(&count));
  SIM_CHECK(count == static_cast<int>(args.size()));
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    const int physical = std::atoi(args[ordinal].c_str());
    CUuuid uuid{};
    SIM_OK(cuDeviceGetUuid_v2(&uuid, ordinal));
    SIM_CHECK(static_cast<unsigned char>(uuid.bytes[15]) == physical);
    size_t total = 0;
    SIM_OK(cuDeviceTotalMem(&total, ordinal));
    SIM_CHECK(total == static_cast<uint64_t>(physical + 1) * kGiB);  // VGPU_SIM_MEMORY=1GiB,2GiB
    char bus[32];
    SIM_OK(cuDeviceGetPCIBusId(bus, sizeof bus, ordinal));
    CUdevice back = -1;
    SIM_OK(cuDeviceGetByPCIBusId(&back, bus));
    SIM_CHECK(back == ordinal);
  }
  // NVML ignores CUDA_VISIBLE_DEVICES.
  SIM_NVML_OK(nvmlInit_v2());
  unsigned nvml_count = 0;
  SIM_NVML_OK(nvmlDeviceGetCount_v2(&nvml_count));
  SIM_CHECK(nvml_count == 2);
  return 0;
}

// Takes the state file's mutex directly (through the documented layout) and waits to be killed.
int ChildLockState() {
  const int fd = open(std::getenv("VGPU_SIM_STATE"), O_RDWR);
  SIM_CHECK(fd >= 0);
  void* addr = mmap(nullptr, sizeof(vgpusim::layout::StateFile), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  SIM_CHECK(addr != MAP_FAILED);
  auto* file = static_cast<vgpusim::layout::StateFile*>(addr);
  SIM_CHECK(file->magic == vgpusim::layout::kMagic && file->version == vgpusim::layout::kVersion);
  const int rc = pthread_mutex_lock(&file->mutex);
  SIM_CHECK(rc == 0 || rc == EOWNERDEAD);
  std::printf("locked\n");
  std::fflush(stdout);
  for (;;) pause();
}

// Without VGPU_SIM_STATE: private state, still shared by the CUDA and NVML halves.
int ChildPrivate() {
  SIM_OK(cuInit(0));
  RetainPrimary(0);
  CUdeviceptr p = 0;
  SIM_OK(cuMemAlloc(&p, 10 * kMiB));
  SIM_NVML_OK(nvmlInit_v2());
  SIM_CHECK(NvmlProcessBytes(0, getpid()) == 266 * kMiB);
  nvmlDevice_t device = nullptr;
  SIM_NVML_OK(nvmlDeviceGetHandleByIndex_v2(0, &device));
  nvmlMemory_t mem{};
  SIM_NVML_OK(nvmlDeviceGetMemoryInfo(device, &mem));
  SIM_CHECK(mem.used == 266 * kMiB);  // the parent's usage is not visible
  SIM_CHECK(FreeBytes() == kGiB - 266 * kMiB);
  return 0;
}

int ChildInitRc(int expected) {
  SIM_CHECK_CU(cuInit(0), static_cast<CUresult>(expected));
  return 0;
}

int RunChild(const std::vector<std::string>& args) {
  const std::string& mode = args.at(0);
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (mode == "hold") return ChildHold(std::stoull(rest.at(0)));
  if (mode == "leak") return ChildLeak(std::stoull(rest.at(0)));
  if (mode == "visible") return ChildVisible(rest);
  if (mode == "init-rc") return ChildInitRc(std::stoi(rest.at(0)));
  if (mode == "lock-state") return ChildLockState();
  if (mode == "private") return ChildPrivate();
  return Phase2Child(args);
}

// --- phase-1 checks ------------------------------------------------------------------------

void TestBeforeInit() {
  int count = 0;
  SIM_CHECK_CU(cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
  CUdeviceptr p = 0;
  SIM_CHECK_CU(cuMemAlloc(&p, 1), CUDA_ERROR_NOT_INITIALIZED);
  void* fn = nullptr;
  SIM_OK(cuGetProcAddress("cuInit", &fn, 13000, 0, nullptr));  // works before cuInit
  SIM_CHECK(fn == reinterpret_cast<void*>(&cuInit));
  for (const char* lib : {"libcuda.so.1", "libnvidia-ml.so.1"}) {
    void* handle = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
    SIM_CHECK(handle != nullptr);
    auto marker = reinterpret_cast<int (*)()>(dlsym(handle, "vgpu_sim_marker"));
    SIM_CHECK(marker != nullptr && marker() == 1);
  }
  // Internals are not exported (vgpusim::cuda::Rt()).
  SIM_CHECK(dlsym(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD), "_ZN7vgpusim4cuda2RtEv") == nullptr);
}

void TestDevices() {
  int count = 0;
  SIM_OK(cuDeviceGetCount(&count));
  SIM_CHECK(count == 2);
  char name[128];
  SIM_OK(cuDeviceGetName(name, sizeof name, 0));
  SIM_CHECK(std::strcmp(name, "Simulated GPU (vgpu test double)") == 0);
  int value = 0;
  SIM_OK(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
  SIM_CHECK(value == 9);
  SIM_OK(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
  SIM_CHECK(value == 132);
  SIM_OK(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1));
  SIM_CHECK(value == 1);
  SIM_CHECK_CU(cuDeviceGetAttribute(nullptr, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0), CUDA_ERROR_INVALID_VALUE);
  SIM_CHECK_CU(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 2), CUDA_ERROR_INVALID_DEVICE);
  size_t total = 0;
  SIM_OK(cuDeviceTotalMem(&total, 1));
  SIM_CHECK(total == 2 * kGiB);
  auto total_v1 = reinterpret_cast<CUresult (*)(unsigned*, CUdevice)>(
      dlsym(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD), "cuDeviceTotalMem"));
  unsigned total32 = 0;
  SIM_OK(total_v1(&total32, 0));
  SIM_CHECK(total32 == kGiB);
  CUuuid a{}, b{};
  SIM_OK(cuDeviceGetUuid_v2(&a, 0));
  SIM_OK(cuDeviceGetUuid_v2(&b, 1));
  SIM_CHECK(std::memcmp(a.bytes, b.bytes, 16) != 0);
  char bus0[32], bus1[32];
  SIM_OK(cuDeviceGetPCIBusId(bus0, sizeof bus0, 0));
  SIM_OK(cuDeviceGetPCIBusId(bus1, sizeof bus1, 1));
  SIM_CHECK(std::strcmp(bus0, bus1) != 0);
  const char* text = nullptr;
  SIM_OK(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &text));
  SIM_CHECK(text != nullptr && std::strstr(text, "memory") != nullptr);
  SIM_OK(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &text));
  SIM_CHECK(std::strcmp(text, "CUDA_ERROR_OUT_OF_MEMORY") == 0);
  SIM_CHECK_CU(cuGetErrorName(static_cast<CUresult>(12345), &text), CUDA_ERROR_INVALID_VALUE);
  // NVML sees the same devices.
  nvmlDevice_t device = nullptr;
  SIM_NVML_OK(nvmlDeviceGetHandleByIndex_v2(1, &device));
  char uuid[96];
  SIM_NVML_OK(nvmlDeviceGetUUID(device, uuid, sizeof uuid));
  SIM_CHECK(std::strcmp(uuid, "GPU-5151a000-0000-4000-8000-000000000001") == 0);
  nvmlDevice_t by_uuid = nullptr;
  SIM_NVML_OK(nvmlDeviceGetHandleByUUID(uuid, &by_uuid));
  SIM_CHECK(by_uuid == device);
  nvmlPciInfo_t pci{};
  SIM_NVML_OK(nvmlDeviceGetPciInfo_v3(device, &pci));
  nvmlDevice_t by_pci = nullptr;
  SIM_NVML_OK(nvmlDeviceGetHandleByPciBusId_v2(pci.busId, &by_pci));
  SIM_CHECK(by_pci == device);
  SIM_CHECK(std::strcmp(pci.busIdLegacy, bus1) == 0);
}

void TestMemory(int self) {
  CUdeviceptr p = 0;
  SIM_CHECK_CU(cuMemAlloc(&p, 1), CUDA_ERROR_INVALID_CONTEXT);
  SIM_CHECK(NvmlProcessBytes(0, self) == 0);
  RetainPrimary(0);
  // Context overhead: visible in cuMemGetInfo and in NVML's per-process usage.
  SIM_CHECK(FreeBytes() == kGiB - 256 * kMiB);
  SIM_CHECK(NvmlProcessBytes(0, self) == 256 * kMiB);
  nvmlDevice_t device = nullptr;
  SIM_NVML_OK(nvmlDeviceGetHandleByIndex_v2(0, &device));
  nvmlMemory_v2_t mem{};
  mem.version = nvmlMemory_v2;
  SIM_NVML_OK(nvmlDeviceGetMemoryInfo_v2(device, &mem));
  SIM_CHECK(mem.total == kGiB && mem.used == 256 * kMiB && mem.free == kGiB - 256 * kMiB);
  mem.version = 1;
  SIM_CHECK(nvmlDeviceGetMemoryInfo_v2(device, &mem) == NVML_ERROR_ARGUMENT_VERSION_MISMATCH);

  // Granularity rounding; exact address ranges.
  SIM_OK(cuMemAlloc(&p, 1));
  SIM_CHECK(FreeBytes() == kGiB - 258 * kMiB);
  CUdeviceptr base = 0;
  size_t size = 0;
  SIM_OK(cuMemGetAddressRange(&base, &size, p));
  SIM_CHECK(base == p && size == 1);
  SIM_OK(cuMemFree(p));
  SIM_CHECK_CU(cuMemFree(p), CUDA_ERROR_INVALID_VALUE);
  SIM_CHECK_CU(cuMemFree(0x1234), CUDA_ERROR_INVALID_VALUE);
  SIM_CHECK_CU(cuMemAlloc(&p, 0), CUDA_ERROR_INVALID_VALUE);
  SIM_CHECK_CU(cuMemAlloc(nullptr, 1), CUDA_ERROR_INVALID_VALUE);

}

// Allocate to OOM: 768 MiB remain after the context; 3 MiB rounds to 4 MiB.
void TestAllocToOom(int self) {
  CUdeviceptr p = 0;
  std::vector<CUdeviceptr> blocks;
  SIM_OK(cuMemAlloc(&p, 3 * kMiB));
  blocks.push_back(p);
  SIM_CHECK(FreeBytes() == 764 * kMiB);
  while (cuMemAlloc(&p, 64 * kMiB) == CUDA_SUCCESS) blocks.push_back(p);
  SIM_CHECK(blocks.size() == 12);  // 4 MiB + 11 x 64 MiB = 708 MiB
  SIM_CHECK(FreeBytes() == 60 * kMiB);
  SIM_OK(cuMemAlloc(&p, 59 * kMiB + 1));  // rounds to exactly the 60 MiB left
  blocks.push_back(p);
  SIM_CHECK(FreeBytes() == 0);
  SIM_CHECK_CU(cuMemAlloc(&p, 1), CUDA_ERROR_OUT_OF_MEMORY);
  SIM_CHECK(NvmlProcessBytes(0, self) == kGiB);
  for (CUdeviceptr block : blocks) SIM_OK(cuMemFree(block));
  SIM_CHECK(FreeBytes() == 768 * kMiB);
}

// Pitch, managed (charged), host (not charged), v1 ABI (32-bit pointers), copies.
void TestAllocKinds() {
  CUdeviceptr p = 0;
  size_t pitch = 0;
  SIM_OK(cuMemAllocPitch(&p, &pitch, 1000, 1000, 4));
  SIM_CHECK(pitch == 1024 && FreeBytes() == 766 * kMiB);
  SIM_OK(cuMemFree(p));
  SIM_OK(cuMemAllocManaged(&p, 5 * kMiB, CU_MEM_ATTACH_GLOBAL));
  SIM_CHECK(FreeBytes() == 762 * kMiB);
  SIM_OK(cuMemFree(p));
  void* host = nullptr;
  SIM_OK(cuMemAllocHost(&host, 64 * kMiB));
  std::memset(host, 1, 4096);  // real host memory
  SIM_CHECK(FreeBytes() == 768 * kMiB);
  SIM_OK(cuMemFreeHost(host));
  SIM_CHECK_CU(cuMemFreeHost(host), CUDA_ERROR_INVALID_VALUE);
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  auto alloc_v1 = reinterpret_cast<CUresult (*)(unsigned*, unsigned)>(dlsym(lib, "cuMemAlloc"));
  auto free_v1 = reinterpret_cast<CUresult (*)(unsigned)>(dlsym(lib, "cuMemFree"));
  unsigned small = 0;
  SIM_OK(alloc_v1(&small, 10 * kMiB));
  SIM_CHECK(small != 0 && FreeBytes() == 758 * kMiB);
  SIM_OK(free_v1(small));
  SIM_CHECK(FreeBytes() == 768 * kMiB);
  // Copies validate their arguments.
  char buf[16];
  SIM_OK(cuMemAlloc(&p, 16));
  SIM_OK(cuMemcpyHtoD(p, buf, sizeof buf));
  SIM_OK(cuMemcpyDtoH(buf, p, sizeof buf));
  SIM_CHECK_CU(cuMemcpyDtoH(nullptr, p, sizeof buf), CUDA_ERROR_INVALID_VALUE);
  SIM_OK(cuMemsetD32(p, 7, 4));
  SIM_OK(cuMemFree(p));
}

// A second process on the same state file sees our usage and we see its; killing it frees its.
// Managed memory: where it is (charged only on the device), advice, prefetch, attributes.
void TestManaged() {
  CUdeviceptr host_side = 0, device_side = 0, plain = 0;
  SIM_OK(cuMemAllocManaged(&host_side, 10 * kMiB, CU_MEM_ATTACH_HOST));
  SIM_CHECK(FreeBytes() == 768 * kMiB);  // starts on the host
  SIM_OK(cuMemAllocManaged(&device_side, 10 * kMiB, CU_MEM_ATTACH_GLOBAL));
  SIM_CHECK(FreeBytes() == 758 * kMiB);  // resident on the device
  SIM_OK(cuMemAlloc(&plain, 2 * kMiB));
  unsigned int managed = 7;
  SIM_OK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, host_side + 4096));
  SIM_CHECK(managed == 1);
  SIM_OK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, plain));
  SIM_CHECK(managed == 0);
  int ordinal = -1;
  SIM_OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, host_side));
  SIM_CHECK(ordinal == 0);
  SIM_CHECK_CU(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, 0x10), CUDA_ERROR_INVALID_VALUE);

  CUmemLocation host{};
  host.type = CU_MEM_LOCATION_TYPE_HOST;
  CUmemLocation dev0{};
  dev0.type = CU_MEM_LOCATION_TYPE_DEVICE;
  dev0.id = 0;
  int value = 0;
  SIM_OK(cuMemRangeGetAttribute(&value, sizeof value, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, host_side, kMiB));
  SIM_CHECK(value == CU_DEVICE_INVALID);
  SIM_OK(cuMemAdvise(host_side, 10 * kMiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host));
  SIM_OK(cuMemAdvise(host_side, 10 * kMiB, CU_MEM_ADVISE_SET_ACCESSED_BY, dev0));
  SIM_OK(cuMemRangeGetAttribute(&value, sizeof value, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, host_side, kMiB));
  SIM_CHECK(value == CU_DEVICE_CPU);
  int accessed[3] = {9, 9, 9};
  SIM_OK(cuMemRangeGetAttribute(accessed, sizeof accessed, CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, host_side, kMiB));
  SIM_CHECK(accessed[0] == 0 && accessed[1] == CU_DEVICE_INVALID && accessed[2] == CU_DEVICE_INVALID);
  SIM_CHECK(FreeBytes() == 756 * kMiB);  // advice moves nothing
  SIM_CHECK_CU(cuMemAdvise(plain, kMiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host), CUDA_ERROR_INVALID_VALUE);
  SIM_CHECK_CU(cuMemAdvise(host_side, 11 * kMiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host), CUDA_ERROR_INVALID_VALUE);

  // Prefetching moves it: onto the device (charged), back to the host (not).
  SIM_OK(cuMemPrefetchAsync(host_side, 10 * kMiB, dev0, 0, nullptr));
  SIM_CHECK(FreeBytes() == 746 * kMiB);
  SIM_OK(cuMemRangeGetAttribute(&value, sizeof value, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, host_side, kMiB));
  SIM_CHECK(value == 0);
  SIM_OK(cuMemPrefetchAsync(host_side, 10 * kMiB, host, 0, nullptr));
  SIM_OK(cuMemPrefetchAsync(device_side, 10 * kMiB, host, 0, nullptr));
  SIM_CHECK(FreeBytes() == 766 * kMiB);
  SIM_OK(cuMemRangeGetAttribute(&value, sizeof value, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, device_side, kMiB));
  SIM_CHECK(value == CU_DEVICE_CPU);
  SIM_OK(cuMemFree(host_side));
  SIM_OK(cuMemFree(device_side));
  SIM_OK(cuMemFree(plain));
  SIM_CHECK(FreeBytes() == 768 * kMiB);
}

void TestTwoProcesses(int self) {
  const uint64_t before = FreeBytes();
  int out = -1;
  const int child = Spawn({"hold", "100"}, {}, &out);
  const std::string line = ReadLine(out);
  close(out);
  SIM_CHECK(!line.empty());
  const uint64_t child_view = std::stoull(line);
  SIM_CHECK(FreeBytes() == before - 356 * kMiB);
  SIM_CHECK(child_view == FreeBytes());
  SIM_CHECK(NvmlProcessBytes(0, child) == 356 * kMiB);
  SIM_CHECK(NvmlProcessBytes(0, self) == 256 * kMiB);
  // SIGKILL: reclaimed even while the child is a zombie, before we reap it.
  SIM_CHECK(kill(child, SIGKILL) == 0);
  for (int i = 0; i < 200 && FreeBytes() != before; ++i) usleep(5000);
  SIM_CHECK(FreeBytes() == before);
  SIM_CHECK(NvmlProcessBytes(0, child) == 0);
  SIM_CHECK(Wait(child) == 128 + SIGKILL);
  // A process that exits without freeing.
  SIM_CHECK(Wait(Spawn({"leak", "50"}, {}, nullptr)) == 0);
  SIM_CHECK(FreeBytes() == before);
}

// A process killed while holding the state mutex does not wedge everybody else.
void TestDeadLockHolder() {
  const uint64_t before = FreeBytes();
  int out = -1;
  const int child = Spawn({"lock-state"}, {}, &out);
  SIM_CHECK(ReadLine(out) == "locked");
  close(out);
  SIM_CHECK(kill(child, SIGKILL) == 0);
  SIM_CHECK(Wait(child) == 128 + SIGKILL);
  alarm(10);  // a hang below fails the test instead of blocking CI
  SIM_CHECK(FreeBytes() == before);
  alarm(0);
}

// fork() after cuInit: the child starts uninitialised, gets a state slot of its own, and its
// usage is reclaimed when it exits.
void TestFork(int self) {
  const uint64_t before = FreeBytes();
  const uint64_t own = NvmlProcessBytes(0, self);
  const pid_t child = fork();
  SIM_CHECK(child >= 0);
  if (child == 0) {
    alarm(10);
    int count = 0;
    SIM_CHECK_CU(cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
    SIM_OK(cuInit(0));
    RetainPrimary(0);
    CUdeviceptr p = 0;
    SIM_OK(cuMemAlloc(&p, 10 * kMiB));
    SIM_CHECK(NvmlProcessBytes(0, getpid()) == 266 * kMiB);
    SIM_CHECK(NvmlProcessBytes(0, self) == own);
    SIM_CHECK(FreeBytes() == before - 266 * kMiB);
    _exit(0);
  }
  SIM_CHECK(Wait(child) == 0);
  SIM_CHECK(FreeBytes() == before);
  SIM_CHECK(NvmlProcessBytes(0, self) == own);
}

// Many threads allocating and freeing at once keep exact accounting.
void TestThreads(CUcontext ctx) {
  const uint64_t before = FreeBytes();
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) ++failures;
      for (int i = 0; i < 200; ++i) {
        CUdeviceptr p = 0;
        if (cuMemAlloc(&p, 1 + static_cast<size_t>(i) * 4096) != CUDA_SUCCESS || cuMemFree(p) != CUDA_SUCCESS) {
          ++failures;
        }
        nvmlDevice_t device = nullptr;
        nvmlMemory_t mem{};
        if (nvmlDeviceGetHandleByIndex(0, &device) != NVML_SUCCESS || nvmlDeviceGetMemoryInfo(device, &mem) != NVML_SUCCESS) {
          ++failures;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  SIM_CHECK(failures == 0);
  SIM_CHECK(FreeBytes() == before);
}

void TestKernelsAndEvents(CUfunction sleep_fn) {
  CUstream s1 = nullptr, s2 = nullptr;
  SIM_OK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  SIM_OK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CUevent start = nullptr, stop = nullptr;
  SIM_OK(cuEventCreate(&start, CU_EVENT_DEFAULT));
  SIM_OK(cuEventCreate(&stop, CU_EVENT_DEFAULT));
  const uint64_t t0 = NowNs();
  SIM_OK(cuEventRecord(start, s1));
  LaunchSleep(sleep_fn, s1, 20000000);
  LaunchSleep(sleep_fn, s2, 20000000);  // one engine: runs after the first
  SIM_OK(cuEventRecord(stop, s2));
  SIM_CHECK(NowNs() - t0 < 5000000);  // launches are asynchronous
  SIM_CHECK_CU(cuStreamQuery(s2), CUDA_ERROR_NOT_READY);
  SIM_CHECK_CU(cuEventQuery(stop), CUDA_ERROR_NOT_READY);
  float ms = 0;
  SIM_CHECK_CU(cuEventElapsedTime(&ms, start, stop), CUDA_ERROR_NOT_READY);
  SIM_OK(cuStreamSynchronize(s1));
  const uint64_t t1 = NowNs();
  SIM_CHECK(t1 - t0 >= 19000000 && t1 - t0 < 35000000);
  SIM_OK(cuStreamSynchronize(s2));
  const uint64_t t2 = NowNs();
  SIM_CHECK(t2 - t0 >= 39000000 && t2 - t0 < 70000000);
  SIM_OK(cuStreamQuery(s2));
  SIM_OK(cuEventQuery(stop));
  SIM_OK(cuEventElapsedTime(&ms, start, stop));
  SIM_CHECK(ms >= 39.9f && ms < 45.0f);
  // An ordinary kernel takes VGPU_SIM_KERNEL_NS (5 us).
  SIM_OK(cuEventRecord(start, s1));
  SIM_OK(cuLaunchKernel(sleep_fn, 1, 1, 1, 1, 1, 1, 0, s1, nullptr, nullptr));  // no params: default
  SIM_OK(cuEventRecord(stop, s1));
  SIM_OK(cuEventSynchronize(stop));
  SIM_OK(cuEventElapsedTime(&ms, start, stop));
  SIM_CHECK(ms >= 0.004f && ms < 0.5f);
  SIM_CHECK_CU(cuLaunchKernel(sleep_fn, 0, 1, 1, 1, 1, 1, 0, s1, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  SIM_CHECK_CU(cuLaunchKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, s1, nullptr, nullptr), CUDA_ERROR_INVALID_HANDLE);
  // Per-thread default stream and cuLaunchKernelEx.
  CUlaunchConfig config{};
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = config.blockDimY = config.blockDimZ = 1;
  config.hStream = CU_STREAM_PER_THREAD;
  uint64_t ns = 2000000;
  void* params[] = {&ns};
  SIM_OK(cuLaunchKernelEx(&config, sleep_fn, params, nullptr));
  SIM_CHECK_CU(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY);
  SIM_OK(cuCtxSynchronize());
  SIM_OK(cuStreamQuery(CU_STREAM_PER_THREAD));
  // Utilization over the last second: a 300 ms kernel shows as ~30%.
  usleep(1000000);
  LaunchSleep(sleep_fn, s1, 300000000);
  SIM_OK(cuStreamSynchronize(s1));
  nvmlDevice_t device = nullptr;
  SIM_NVML_OK(nvmlDeviceGetHandleByIndex_v2(0, &device));
  nvmlUtilization_t util{};
  SIM_NVML_OK(nvmlDeviceGetUtilizationRates(device, &util));
  SIM_CHECK(util.gpu >= 27 && util.gpu <= 35);
  SIM_OK(cuEventDestroy(start));
  SIM_OK(cuEventDestroy(stop));
  SIM_OK(cuStreamDestroy(s1));
  SIM_OK(cuStreamDestroy(s2));
  SIM_CHECK_CU(cuStreamDestroy(s2), CUDA_ERROR_INVALID_HANDLE);
}

void TestProcAddress() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  SIM_CHECK(lib != nullptr);
  std::set<void*> seen;
  int rows = 0;
  // Every row of the table: the exact (version, per-thread) request returns that symbol.
#define SIM_CUDA_ENTRY(base, version, suffix, symbol)                                                      \
  {                                                                                                        \
    void* expected = dlsym(lib, #symbol);                                                                  \
    SIM_CHECK(expected != nullptr);                                                                        \
    SIM_CHECK(seen.insert(expected).second);                                                               \
    void* got = nullptr;                                                                                   \
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;                          \
    const cuuint64_t flags = sizeof(#suffix) > 1 ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0;      \
    SIM_OK(cuGetProcAddress(#base, &got, version, flags, &status));                                        \
    if (got != expected) Fail(__FILE__, __LINE__, "cuGetProcAddress(" #base ", " #version ") != " #symbol); \
    SIM_CHECK(status == CU_GET_PROC_ADDRESS_SUCCESS);                                                      \
    ++rows;                                                                                                \
  }
#include "sim_cuda_exports.def"
#undef SIM_CUDA_ENTRY
  SIM_CHECK(rows > 150);
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status{};
  SIM_OK(cuGetProcAddress("cuMemAlloc", &fn, 13000, 0, &status));
  SIM_CHECK(fn == dlsym(lib, "cuMemAlloc_v2"));
  SIM_OK(cuGetProcAddress("cuMemAlloc", &fn, 3000, 0, &status));
  SIM_CHECK(fn == dlsym(lib, "cuMemAlloc"));
  SIM_CHECK_CU(cuGetProcAddress("cuMemAlloc", &fn, 1000, 0, &status), CUDA_ERROR_NOT_FOUND);
  SIM_CHECK(status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT && fn == nullptr);
  SIM_CHECK_CU(cuGetProcAddress("cuNoSuchFunction", &fn, 13000, 0, &status), CUDA_ERROR_NOT_FOUND);
  SIM_CHECK(status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  SIM_OK(cuGetProcAddress("cuLaunchKernel", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
  SIM_CHECK(fn == dlsym(lib, "cuLaunchKernel_ptsz"));
  SIM_OK(cuGetProcAddress("cuLaunchKernel", &fn, 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status));
  SIM_CHECK(fn == dlsym(lib, "cuLaunchKernel"));
  SIM_OK(cuGetProcAddress("cuMemcpyHtoD", &fn, 6050, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
  SIM_CHECK(fn == dlsym(lib, "cuMemcpyHtoD_v2"));  // _ptds appeared in 7.0
  SIM_OK(cuGetProcAddress("cuStreamBeginCapture", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
  SIM_CHECK(fn == dlsym(lib, "cuStreamBeginCapture_v2_ptsz"));
  SIM_OK(cuGetProcAddress("cuCtxCreate", &fn, 12000, 0, &status));
  SIM_CHECK(fn == dlsym(lib, "cuCtxCreate_v3"));
  SIM_OK(cuGetProcAddress("cuGetProcAddress", &fn, 11030, 0, &status));
  SIM_CHECK(fn == dlsym(lib, "cuGetProcAddress"));
  auto get_v1 = reinterpret_cast<CUresult (*)(const char*, void**, int, cuuint64_t)>(fn);
  SIM_OK(get_v1("cuMemGetInfo", &fn, 12000, 0));
  SIM_CHECK(fn == dlsym(lib, "cuMemGetInfo_v2"));
  SIM_CHECK_CU(cuGetProcAddress(nullptr, &fn, 13000, 0, &status), CUDA_ERROR_INVALID_VALUE);
  const void* table = nullptr;
  CUuuid id{};
  SIM_CHECK_CU(cuGetExportTable(&table, &id), CUDA_ERROR_NOT_SUPPORTED);
}

void TestContexts(int self) {
  CUcontext ctx = nullptr;
  SIM_OK(cuCtxCreate(&ctx, nullptr, 0, 1));
  SIM_CHECK(NvmlProcessBytes(1, self) == 256 * kMiB);
  CUdevice dev = -1;
  SIM_OK(cuCtxGetDevice(&dev));
  SIM_CHECK(dev == 1);
  CUdeviceptr p = 0;
  SIM_OK(cuMemAlloc(&p, 10 * kMiB));
  SIM_CHECK(NvmlProcessBytes(1, self) == 266 * kMiB);
  CUcontext popped = nullptr;
  SIM_OK(cuCtxPopCurrent(&popped));
  SIM_CHECK(popped == ctx);
  SIM_OK(cuCtxPushCurrent(ctx));
  SIM_OK(cuCtxDestroy(ctx));  // frees its allocations and its overhead
  SIM_CHECK(NvmlProcessBytes(1, self) == 0);
  CUcontext current = nullptr;
  SIM_OK(cuCtxGetCurrent(&current));
  SIM_CHECK(current != ctx);
  SIM_CHECK_CU(cuCtxDestroy(ctx), CUDA_ERROR_INVALID_CONTEXT);
}

void TestVisibleDevicesAndInit() {
  SIM_CHECK(Wait(Spawn({"visible", "1", "0"}, {"CUDA_VISIBLE_DEVICES=1,0"}, nullptr)) == 0);
  SIM_CHECK(Wait(Spawn({"visible", "1"}, {"CUDA_VISIBLE_DEVICES=GPU-5151a000-0000-4000-8000-000000000001"},
                       nullptr)) == 0);
  SIM_CHECK(Wait(Spawn({"visible", "0"}, {"CUDA_VISIBLE_DEVICES=0,7,1"}, nullptr)) == 0);  // stops at 7
  SIM_CHECK(Wait(Spawn({"private"}, {"VGPU_SIM_STATE="}, nullptr)) == 0);
  SIM_CHECK(Wait(Spawn({"init-rc", std::to_string(CUDA_ERROR_NO_DEVICE)}, {"VGPU_SIM_FAIL_INIT=1"}, nullptr)) == 0);
  SIM_CHECK(Wait(Spawn({"init-rc", std::to_string(CUDA_ERROR_NO_DEVICE)}, {"CUDA_VISIBLE_DEVICES="}, nullptr)) == 0);
  SIM_CHECK(Wait(Spawn({"init-rc", std::to_string(CUDA_ERROR_INVALID_VALUE)}, {"VGPU_SIM_KERNEL_NS=fast"},
                       nullptr)) == 0);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "child") return RunChild({args.begin() + 1, args.end()});

  const std::string state = "/tmp/vgpu-sim-selftest-" + std::to_string(getpid()) + ".state";
  setenv("VGPU_SIM_STATE", state.c_str(), 1);
  setenv("VGPU_SIM_DEVICE_COUNT", "2", 1);
  setenv("VGPU_SIM_MEMORY", "1GiB,2GiB", 1);
  setenv("VGPU_SIM_GRANULARITY", "2MiB", 1);
  setenv("VGPU_SIM_CONTEXT_OVERHEAD", "256MiB", 1);
  setenv("VGPU_SIM_POOL_CHUNK", "32MiB", 1);
  setenv("VGPU_SIM_KERNEL_NS", "5000", 1);
  unsetenv("CUDA_VISIBLE_DEVICES");
  unsetenv("VGPU_SIM_FAIL_INIT");
  unsetenv("VGPU_SIM_MODULE_MEMORY");
  const uint64_t t0 = NowNs();
  const int self = getpid();

  TestBeforeInit();
  SIM_OK(cuInit(0));
  SIM_NVML_OK(nvmlInit_v2());
  TestDevices();
  TestProcAddress();
  TestMemory(self);
  TestAllocToOom(self);
  TestAllocKinds();
  TestManaged();
  TestTwoProcesses(self);
  TestDeadLockHolder();
  TestFork(self);
  CUcontext primary = nullptr;
  SIM_OK(cuCtxGetCurrent(&primary));
  TestThreads(primary);
  CUmodule module = nullptr;
  static const char kImage[] = "any image";
  SIM_OK(cuModuleLoadData(&module, kImage));
  CUfunction sleep_fn = nullptr;
  SIM_OK(cuModuleGetFunction(&sleep_fn, module, "sim_sleep_ns"));
  TestKernelsAndEvents(sleep_fn);
  TestContexts(self);
  TestVisibleDevicesAndInit();
  std::printf("sim_selftest: phase 1 passed\n");
  RunPhase2(sleep_fn);
  SIM_OK(cuModuleUnload(module));
  SIM_OK(cuDevicePrimaryCtxRelease(0));
  SIM_CHECK(NvmlProcessBytes(0, self) == 0);
  SIM_NVML_OK(nvmlShutdown());
  unlink(state.c_str());
  std::printf("sim_selftest: all passed in %.1f s\n", static_cast<double>(NowNs() - t0) / 1e9);
  return 0;
}
