#include "cli/commands.h"

#include <array>

#include "cli/info.h"
#include "cli/ps.h"
#include "cli/run.h"
#include "cli/top.h"

namespace vgpu::cli {
namespace {

constexpr std::array kHelpOptions = {OptionSpec{"help", 'h', "", "Show this help."}};
std::span<const OptionSpec> HelpOptions() { return kHelpOptions; }
int HelpMain(const ParsedArgs& args, std::ostream& out, std::ostream& err);

constexpr std::string_view kRunDescription =
    "Runs a command with libvgpu.so preloaded, under device-memory and compute limits. The\n"
    "limits bind the command and every process it starts together: one budget per GPU,\n"
    "shared through a per-run ledger file. Without a limit option the command runs\n"
    "unlimited but accounted (visible to the ledger).\n"
    "\n"
    "Examples:\n"
    "  vgpu run --memory 4GiB --compute 30 -- python train.py\n"
    "  vgpu run --devices 0,1 --memory 0=8GiB,1=2GiB -- ./server --port 8080\n"
    "  vgpu run --compute 30 --soft-compute 80 --priority 1 -- ./batch-job";

constexpr std::string_view kRunEpilog =
    "Environment:\n"
    "  The job gets LD_PRELOAD (libvgpu.so first; other copies of libvgpu.so removed),\n"
    "  CUDA_DEVICE_MEMORY_LIMIT[_<i>] (bytes), CUDA_DEVICE_SM_LIMIT[_<i>] (percent),\n"
    "  CUDA_CORE_SOFT_LIMIT[_<i>], CUDA_TASK_PRIORITY, CUDA_OVERSUBSCRIBE, CUDA_VISIBLE_DEVICES,\n"
    "  LIBCUDA_LOG_LEVEL (with -v) and CUDA_DEVICE_MEMORY_SHARED_CACHE (the ledger), as its\n"
    "  options ask.\n"
    "  Before setting them, vgpu run REMOVES every inherited limit variable of every dialect\n"
    "  (CUDA_DEVICE_MEMORY_LIMIT*, CUDA_DEVICE_SM_LIMIT*, CUDA_DEVICE_*_LIMIT*, CUDA_MEM_LIMIT*,\n"
    "  CUDA_CORE_LIMIT*, CUDA_CORE_SOFT_LIMIT*, WRAPPER_MAX_MEMORY, CUDA_OVERSUBSCRIBE,\n"
    "  CUDA_MEMORY_OVERSUBSCRIBE, CUDA_TASK_PRIORITY, CUDA_DEVICE_MEMORY_SHARED_CACHE,\n"
    "  GPU_CORE_UTILIZATION_POLICY, CUDA_DISABLE_CONTROL; and GPU_DEVICES_UUID with --devices),\n"
    "  so the limits on the command line are the only ones in force.\n"
    "  VGPU_LIBRARY: where to find libvgpu.so when --library is not given.\n"
    "\n"
    "Signals:\n"
    "  SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to vgpu are forwarded to the command.\n"
    "\n"
    "Exit status:\n"
    "  the command's exit status, or 128+N if it was killed by signal N;\n"
    "  2 for an invalid option or value (nothing is run); 69 if no NVIDIA driver\n"
    "  (libcuda.so.1) is found; 126 if the command is not executable; 127 if it is not found;\n"
    "  1 if vgpu itself fails (e.g. cannot create the run directory).";

constexpr std::string_view kInfoDescription =
    "Shows the libvgpu.so that `vgpu run` would use, the NVIDIA driver found (path, whether it\n"
    "is the project's simulated driver, CUDA version), the GPUs NVML reports (name, UUID,\n"
    "memory) and the vgpu configuration that the current environment sets, in every dialect.";

constexpr std::string_view kInfoEpilog =
    "Exit status:\n"
    "  0; 1 if the limit variables in the environment are invalid (each error is listed);\n"
    "  a machine without a driver is reported, not an error.";

constexpr std::string_view kPsDescription =
    "Lists the ledgers of vgpu jobs and containers and who uses what in them: per GPU the\n"
    "memory used (allocations plus context overhead of every live process) against the\n"
    "limit, the peak, the refused allocations, the compute limit and SHARE, the GPU busy\n"
    "share the compute limiter measures for the job's kernels (moving average; \"-\" when\n"
    "no compute limit has run on that GPU); per process its pid\n"
    "(as seen in the job and on the host) and what it holds on each GPU (\"1 GiB + 300 MiB\"\n"
    "= allocations + context/module overhead). A process that exited without cleaning up is\n"
    "shown until the job's next allocation reclaims it. Under memory oversubscription\n"
    "(CUDA_OVERSUBSCRIBE) a HOST / LIMIT column shows the host memory the GPU's allocations\n"
    "spilled into against its host spill limit, and processes show \", host 2 GiB\".\n"
    "\n"
    "Node-wide: without PATH arguments (and without --local), vgpu ps first asks vgpu-node\n"
    "(--socket, else $VGPU_SOCKET, else /var/lib/vgpu/vgpu.sock) for the containers it manages;\n"
    "each of their ledgers is listed with the container's name, followed by the node's GPUs\n"
    "(memory, utilization, health) and any GPU process in a limited container that bypasses\n"
    "vgpu. Processes of the daemon's ledgers are judged alive by their host pid. Without a\n"
    "daemon (no socket), the local search below also covers /var/lib/vgpu/containers.\n"
    "\n"
    "Without PATH arguments, ledgers are looked for in:\n"
    "  /tmp/vgpu-<uid>/ledger                the library's default ledger\n"
    "  /tmp/vgpu-<uid>/run-*/ledger          `vgpu run` jobs (without XDG_RUNTIME_DIR)\n"
    "  $XDG_RUNTIME_DIR/vgpu/run-*/ledger    `vgpu run` jobs\n"
    "  $VGPU_LEDGER_DIRS                     ':'-separated directories: DIR/ledger, DIR/*/ledger\n"
    "With PATH arguments, only those are listed: ledger files, or directories searched like\n"
    "$VGPU_LEDGER_DIRS entries.\n"
    "Ledgers are read without locking or writing anything. One that cannot be read (missing,\n"
    "corrupt, another layout version, no permission) is listed with its error.\n"
    "\n"
    "Examples:\n"
    "  vgpu ps\n"
    "  vgpu ps --json /run/vgpu/pod-1234/ledger\n"
    "  vgpu ps --local\n"
    "  VGPU_LEDGER_DIRS=/var/lib/vgpu/containers vgpu ps";

constexpr std::string_view kPsEpilog =
    "JSON (--json):\n"
    "  {\"ledgers\": [{\"path\", \"ok\": true, \"authority\", \"task_priority\", \"created_unix_ns\",\n"
    "    \"lock_recoveries\", \"reclaimed_processes\", \"default_memory_limit\",\n"
    "    \"default_sm_limit\", \"default_sm_soft_limit\", \"default_host_limit\" (for GPUs not\n"
    "    listed in \"devices\"),\n"
    "    \"devices\": [{\"index\", \"ordinal\", \"uuid\", \"memory_limit\", \"used\", \"peak\",\n"
    "                 \"oom_refusals\", \"sm_limit\", \"sm_soft_limit\", \"share_ppm\", \"busy_ns\",\n"
    "                 \"throttled_ns\", \"host_limit\", \"spilled\", \"spill_peak\",\n"
    "                 \"spill_refusals\"}],\n"
    "    \"processes\": [{\"pid\", \"host_pid\", \"start_time\", \"alive\",\n"
    "                   \"devices\": [{\"index\", \"charged\", \"overhead\", \"spilled\"}]}]},\n"
    "   {\"path\", \"ok\": false, \"error\"}]}\n"
    "  Ledgers of vgpu-node's containers also have \"label\" (the container), and the object\n"
    "  starts with \"node\", \"gpus\": [{\"index\", \"uuid\", \"name\", \"memory_total\",\n"
    "  \"memory_used\", \"utilization\", \"healthy\", \"health_reason\"}] and \"bypass\":\n"
    "  [{\"host_pid\", \"comm\", \"container\", \"gpus\", \"memory\", \"first_seen_unix\"}].\n"
    "  Sizes are bytes; limits of 0 mean unlimited (a host limit of 0: no spilling);\n"
    "  percentages are whole numbers.\n"
    "\n"
    "Exit status:\n"
    "  0; 1 if any listed ledger could not be read; 2 for an invalid option.";

constexpr std::string_view kTopDescription =
    "A refreshing view of every vgpu container and job (the same ledgers as `vgpu ps`, node-wide\n"
    "through vgpu-node when it runs). One line per container and GPU:\n"
    "  CONTAINER              the container (pod/namespace from vgpu-node) or the ledger path\n"
    "  MEMORY USED / LIMIT    device memory charged (allocations + context) against the limit\n"
    "  HOST SPILL / LIMIT     only when some container may spill (memory oversubscription):\n"
    "                         host memory its spilled allocations hold against the host\n"
    "                         spill limit (\"-\" for a GPU that does not spill)\n"
    "  COMPUTE SHARE / LIMIT  the GPU busy share the compute limiter measures for the\n"
    "                         container's kernels (moving average; \"-\" before any measurement)\n"
    "                         against the compute limit (and the soft limit)\n"
    "  THROTTLED              share of the last interval in which the limiter held the\n"
    "                         container's launches back (\"-\" on the first frame)\n"
    "  PROCS                  live processes in the ledger\n"
    "With vgpu-node, each GPU's memory, utilization and health follow, and a BYPASS line for\n"
    "every GPU process in a limited container that vgpu does not account.\n"
    "On a terminal the screen is redrawn; otherwise frames follow each other, separated by a\n"
    "blank line (for logs and tests: --once or --iterations N).\n"
    "\n"
    "Examples:\n"
    "  vgpu top\n"
    "  vgpu top --interval 0.5\n"
    "  vgpu top --once --local /tmp/vgpu-1000/run-42-1700000000/ledger";

constexpr std::string_view kTopEpilog =
    "Exit status:\n"
    "  0; 1 if a ledger of the last frame could not be read; 2 for an invalid option.";

constexpr std::array kCommands = {
    Command{"run", "Run a command under GPU memory and compute limits",
            "vgpu run [options] [--] command [args...]", kRunDescription, RunOptions,
            OperandMode::kStopAtFirstOperand, kRunEpilog, RunMain},
    Command{"info", "Show the library, driver, GPUs and the configuration in the environment",
            "vgpu info [options]", kInfoDescription, InfoOptions, OperandMode::kInterleaved,
            kInfoEpilog, InfoMain},
    Command{"ps", "Show the GPU memory each vgpu job and process uses, from the ledgers",
            "vgpu ps [--json] [--local] [--socket PATH] [PATH...]", kPsDescription, PsOptions, OperandMode::kInterleaved, kPsEpilog,
            PsMain},
    Command{"top", "Watch memory and compute share against the limits, refreshing",
            "vgpu top [--once | --iterations N] [--interval SECONDS] [--local] [--socket PATH] [PATH...]",
            kTopDescription, TopOptions, OperandMode::kInterleaved, kTopEpilog, TopMain},
    Command{"help", "Show help for vgpu or for a command", "vgpu help [command]",
            "Shows the list of commands, or a command's options.", HelpOptions,
            OperandMode::kInterleaved, "", HelpMain},
};

int HelpMain(const ParsedArgs& args, std::ostream& out, std::ostream& err) {
  if (args.operands.empty()) {
    out << MainHelp();
    return 0;
  }
  if (args.operands.size() > 1) {
    err << "vgpu help: expected one command name\n";
    return 2;
  }
  const Command* command = FindCommand(args.operands[0]);
  if (command == nullptr) {
    err << "vgpu help: unknown command \"" << args.operands[0] << "\" (see 'vgpu --help')\n";
    return 2;
  }
  out << CommandHelp(*command);
  return 0;
}

}  // namespace

std::span<const Command> Commands() { return kCommands; }

const Command* FindCommand(std::string_view name) {
  for (const Command& command : kCommands) {
    if (command.name == name) return &command;
  }
  return nullptr;
}

std::string MainHelp() {
  std::string text = "vgpu " VGPU_VERSION " - share NVIDIA GPUs with hard memory and compute limits\n\n"
                     "Usage: vgpu <command> [options] [args...]\n\nCommands:\n";
  for (const Command& command : kCommands) {
    std::string name(command.name);
    name.resize(8, ' ');
    text += "  " + name + std::string(command.summary) + "\n";
  }
  text +=
      "\nOptions:\n"
      "  -h, --help     Show this help\n"
      "      --version  Print the version\n"
      "\nRun 'vgpu help <command>' or 'vgpu <command> --help' for a command's options.\n";
  return text;
}

std::string CommandHelp(const Command& command) {
  std::string text = "Usage: " + std::string(command.usage) + "\n\n" + std::string(command.description) +
                     "\n\nOptions:\n" + FormatOptionHelp(command.options());
  if (!command.epilog.empty()) text += "\n" + std::string(command.epilog) + "\n";
  return text;
}

int Dispatch(std::span<const std::string> args, std::ostream& out, std::ostream& err) {
  if (args.empty()) {
    err << MainHelp();
    return 2;
  }
  const std::string& first = args[0];
  if (first == "-h" || first == "--help") {
    out << MainHelp();
    return 0;
  }
  if (first == "--version") {
    out << "vgpu " VGPU_VERSION "\n";
    return 0;
  }
  if (first.starts_with("-")) {
    err << "vgpu: unknown option " << first << " (see 'vgpu --help')\n";
    return 2;
  }
  const Command* command = FindCommand(first);
  if (command == nullptr) {
    err << "vgpu: unknown command \"" << first << "\" (see 'vgpu --help')\n";
    return 2;
  }
  const ParseResult parsed = ParseArgs(args.subspan(1), command->options(), command->operand_mode);
  if (!parsed.ok()) {
    err << "vgpu " << command->name << ": " << parsed.error << " (see 'vgpu " << command->name
        << " --help')\n";
    return 2;
  }
  if (parsed.args.Has("help")) {
    out << CommandHelp(*command);
    return 0;
  }
  return command->handler(parsed.args, out, err);
}

}  // namespace vgpu::cli
