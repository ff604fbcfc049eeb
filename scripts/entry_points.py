"""Driver entry points as vgpu's hook table sees them (used by scripts/audit-entry-points).

Three sources of names:
  - the hook table (src/interpose/cuda_hooks.def, nvml_hooks.def): what libvgpu.so interposes;
  - a driver library (libcuda.so.1, libnvidia-ml.so.1, or the toolkit's link stubs): what it
    exports, read with binutils' `nm -D`;
  - a CUDA runtime (libcudart_static.a): the (symbol, cudaVersion, flags) triples it passes to
    cuGetProcAddress, read from its machine code with binutils' `readelf` and `objdump`.

A *family* is an entry point's name without its ABI suffixes (`_v2`, `_v3`, ...) and per-thread
stream suffixes (`_ptsz`, `_ptds`): cuMemAlloc and cuMemAlloc_v2 are one family, and so are
cuGraphInstantiate and cuGraphInstantiate_v2 (but not cuGraphInstantiateWithFlags). Families are
classified by what vgpu must do with them (CLASSES); for the classes marked `must_hook`, every
version of the family that a driver exports must be in the hook table, or a runtime that asks for
that version bypasses the limits.
"""
import os
import re
import shutil
import subprocess
import tempfile
from collections import namedtuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOOK_TABLES = {
    "cuda": os.path.join(REPO, "src", "interpose", "cuda_hooks.def"),
    "nvml": os.path.join(REPO, "src", "interpose", "nvml_hooks.def"),
}
SIM_CUDA_TABLE = os.path.join(REPO, "tests", "simdriver", "sim_cuda_exports.def")

# cuGetProcAddress flags (cuda.h, CUdriverProcAddress_flags).
PER_THREAD_DEFAULT_STREAM = 2

Class = namedtuple("Class", "key title must_hook pattern")

# First match wins. Patterns match a whole family name.
CLASSES = [
    Class("host", "host memory (pinned or registered; not charged)", False,
          r"cuMem(AllocHost|HostAlloc|FreeHost|HostRegister|HostUnregister|HostGetDevicePointer|HostGetFlags)"),
    Class("allocation", "allocation (device memory charged per call, or given back)", True,
          r"cuMem(Alloc\w*|Create|Free|FreeAsync|Release|Map|Unmap)|cu(Array|Array3D|MipmappedArray)(Create|Destroy)"
          r"|cuGraphInstantiate\w*|cuGraphExecDestroy|cuMemPool(TrimTo|Destroy)"),
    Class("placement", "managed-memory placement (oversubscription)", True,
          r"cuMem(PrefetchAsync|PrefetchBatchAsync|DiscardAndPrefetchBatchAsync|Advise)"),
    Class("host_callback", "host callback (no GPU work)", False, r"cuLaunchHostFunc"),
    Class("launch", "launch (admitted by the compute limit)", True, r"cuLaunch\w*|cuGraphLaunch"),
    Class("synchronisation", "synchronisation (compute-limit bookkeeping)", True,
          r"cu(Stream|Ctx|Event)Synchronize|cuStreamDestroy"),
    Class("memory_query", "memory query (reports the limit)", True,
          r"cuMemGetInfo|cuDeviceTotalMem|nvmlDeviceGetMemoryInfo"),
    Class("initialisation", "initialisation and entry-point discovery", True,
          r"cuInit|cuGetProcAddress|nvmlInit|nvmlInitWithFlags"),
    Class("reconciled", "context and module memory (reconciled with NVML)", False,
          r"cuCtxCreate|cuDevicePrimaryCtxRetain|cuGreenCtxCreate|cuModuleLoad\w*|cuLibraryLoad\w*"),
    Class("import", "imported memory (charged to its exporter)", False,
          r"cuIpcOpenMemHandle|cuMemImportFromShareableHandle|cuMemPoolImportPointer|cuImportExternalMemory"
          r"|cuExternalMemoryGetMapped\w+|cuMemRetainAllocationHandle"),
]
PASS_THROUGH = Class("pass", "pass through (no effect on the limits)", False, r"")

_SUFFIXES = re.compile(r"(_v\d+)?(_pt(sz|ds))?$")


class ToolError(Exception):
    """A missing tool, an unreadable file or an input that is not what it should be."""


def family(name):
    """cuMemAlloc_v2 -> cuMemAlloc; cuMemPrefetchAsync_v2_ptsz -> cuMemPrefetchAsync."""
    return _SUFFIXES.sub("", name)


def classify(name):
    """The Class of an entry point (by its family)."""
    fam = family(name)
    for c in CLASSES:
        if re.fullmatch(c.pattern, fam):
            return c
    return PASS_THROUGH


def _run(*argv):
    if shutil.which(argv[0]) is None:
        raise ToolError(f"{argv[0]} not found (binutils)")
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise ToolError(f"{' '.join(argv)} failed: {r.stderr.strip()[-400:]}")
    return r.stdout


def hook_table(path):
    """The symbol names of a hook table (.def), in table order."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise ToolError(f"cannot read hook table {path}: {e.strerror}")
    return re.findall(r"^VGPU_(?:CUDA|NVML)_HOOK\(\s*\w+\s*,\s*(\w+)", text, re.M)


def hooked_names():
    names = set()
    for path in HOOK_TABLES.values():
        names.update(hook_table(path))
    return names


def exported_entry_points(library):
    """cu* and nvml* functions a shared library exports (nm -D --defined-only)."""
    if not os.path.isfile(library):
        raise ToolError(f"{library}: no such file")
    names = set()
    for line in _run("nm", "-D", "--defined-only", library).splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TtWiI" and re.match(r"(cu|nvml)[A-Z]", parts[2]):
            names.add(parts[2].split("@")[0])
    return names


Audit = namedtuple("Audit", "library exported hooked missing partial unhooked")


def audit_library(library, hooked):
    """What of `library`'s exports the hook table does not know, by class.

    missing: exported names in must-hook classes that are not hooked (each a bypass);
    partial: names not hooked whose family has another, hooked version (warn);
    unhooked: class key -> sorted names not hooked.
    """
    exported = exported_entry_points(library)
    if not exported:
        raise ToolError(f"{library}: exports no cu*/nvml* function (not a CUDA driver or NVML library?)")
    hooked_families = {family(n) for n in hooked}
    missing, partial, unhooked = [], [], {}
    for name in sorted(exported - hooked):
        c = classify(name)
        unhooked.setdefault(c.key, []).append(name)
        if c.must_hook:
            missing.append(name)
        elif family(name) in hooked_families:
            partial.append(name)
    return Audit(library, exported, exported & hooked, missing, partial, unhooked)


# --- what a CUDA runtime asks cuGetProcAddress for -------------------------------------------------

Request = namedtuple("Request", "symbol version flags")


def _sections(obj):
    secs = {}
    for line in _run("readelf", "-S", "-W", obj).splitlines():
        m = re.match(r"\s*\[\s*(\d+)\]\s+(\S+)\s+\S+\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+)", line)
        if m:
            secs[int(m.group(1))] = (m.group(2), int(m.group(3), 16), int(m.group(4), 16))
    return secs


def _symbols(obj, secs):
    """Symbol index -> (section name, value). Indices, not names: a runtime's local symbols may
    share a name."""
    syms = {}
    for line in _run("readelf", "-s", "-W", obj).splitlines():
        p = line.split()
        if len(p) >= 7 and p[0].endswith(":") and p[0][:-1].isdigit() and p[6].isdigit() and int(p[6]) in secs:
            syms[int(p[0][:-1])] = (secs[int(p[6])][0], int(p[1], 16))
    return syms


def _relocations(obj):
    """(section the relocation applies to, offset) -> (symbol index, addend)."""
    relocs = {}
    target = None
    for line in _run("readelf", "-r", "-W", obj).splitlines():
        m = re.match(r"Relocation section '\.rela(\S+)'", line)
        if m:
            target = m.group(1)
            continue
        m = re.match(r"([0-9a-f]+)\s+([0-9a-f]+)\s+R_X86_64_\S+\s+[0-9a-f]+\s+.*?([-+])\s*([0-9a-f]+)$", line)
        if m and target:
            addend = int(m.group(4), 16) * (-1 if m.group(3) == "-" else 1)
            relocs[(target, int(m.group(1), 16))] = (int(m.group(2), 16) >> 32, addend)
    return relocs


def requests_of_object(obj):
    """(symbol, cudaVersion, flags) passed to the most-called function pointer that takes a cu*
    name as its first argument: the runtime's cuGetProcAddress.

    The runtime calls cuGetProcAddress(symbol, &slot, cudaVersion, flags[, status]) with
    constants: the symbol's address is loaded into %rdi with a RIP-relative lea (relocated against
    a string in .rodata.str*), cudaVersion into %edx and flags into %ecx as immediates (or a
    self-xor for 0), then an indirect call. Each call site is read between the previous call and
    this one. Returns (requests, calls): the distinct triples and the number of call sites.
    """
    secs = _sections(obj)
    by_name = {name: (off, size) for name, off, size in secs.values()}
    syms = _symbols(obj, secs)
    relocs = _relocations(obj)
    with open(obj, "rb") as f:
        data = f.read()

    def string_at(section, offset):
        base, size = by_name[section]
        if not 0 <= offset < size:
            return None
        end = data.find(b"\0", base + offset)
        return data[base + offset:end].decode("latin-1")

    def lea_target(section, offset):  # the string a RIP-relative lea's relocation points at
        if (section, offset) not in relocs:
            return None
        index, addend = relocs[(section, offset)]
        target, value = syms.get(index, ("", 0))
        if not target.startswith(".rodata.str"):
            return None
        return string_at(target, value + addend + 4)  # the displacement is the last 4 bytes

    sites = []  # (registers, call target)
    regs = {}
    listing = _run("objdump", "-dr", "--no-show-raw-insn", "-w", obj)
    insn_re = re.compile(r"\s*[0-9a-f]+:\t([^#\t]*)(?:#[^\t]*)?(?:\t([0-9a-f]+): R_X86_64_\S+\t(\S+))?$")
    section = None
    for line in listing.splitlines():
        m = re.match(r"Disassembly of section (\S+):", line)
        if m:
            section = m.group(1)
        m = insn_re.match(line)
        if not m:
            regs = {}
            continue
        insn, reloc_at, reloc = m.group(1).strip(), m.group(2), m.group(3)
        if reloc and re.fullmatch(r"lea\s+0x0\(%rip\),%rdi", insn):
            s = lea_target(section, int(reloc_at, 16))
            if s is not None:
                regs["symbol"] = s
            continue
        mm = re.fullmatch(r"mov\s+\$0x([0-9a-f]+),%(edx|rdx|ecx|rcx)", insn)
        if mm:
            regs["version" if mm.group(2) in ("edx", "rdx") else "flags"] = int(mm.group(1), 16)
            continue
        mm = re.fullmatch(r"xor\s+%(edx|ecx),%(edx|ecx)", insn)
        if mm and mm.group(1) == mm.group(2):
            regs["version" if mm.group(1) == "edx" else "flags"] = 0
            continue
        if insn.startswith(("call", "jmp")):
            if re.match(r"cu[A-Z]", regs.get("symbol", "")):
                callee = relocs.get((section, int(reloc_at, 16)), (None,))[0] if reloc_at else None
                sites.append((regs, (insn, callee)))
            regs = {}
    if not sites:
        return set(), 0
    counts = {}
    for _, target in sites:
        counts[target] = counts.get(target, 0) + 1
    gpa = max(counts, key=counts.get)
    requests = set()
    for r, target in sites:
        if target != gpa:
            continue
        if "version" not in r or "flags" not in r:
            raise ToolError(f"{obj}: cannot read cudaVersion/flags of the request for {r['symbol']}")
        requests.add(Request(r["symbol"], r["version"], r["flags"]))
    return requests, counts[gpa]


def runtime_requests(archive):
    """Every (symbol, cudaVersion, flags) a static CUDA runtime (libcudart_static.a) requests."""
    if not os.path.isfile(archive):
        raise ToolError(f"{archive}: no such file")
    with tempfile.TemporaryDirectory(prefix="vgpu-cudart-") as tmp:
        _run("ar", "x", "--output", tmp, archive)
        requests, calls = set(), 0
        for member in sorted(os.listdir(tmp)):
            if member.endswith(".o"):
                r, n = requests_of_object(os.path.join(tmp, member))
                requests |= r
                calls += n
    if calls < 50:
        raise ToolError(f"{archive}: found {calls} cuGetProcAddress call sites; not a CUDA 11.3+ runtime?")
    return requests


# --- how the driver resolves a request --------------------------------------------------------------

SimRow = namedtuple("SimRow", "base version per_thread symbol")


def sim_table(path=SIM_CUDA_TABLE):
    """Rows of the simulated driver's table: every versioned ABI with its exported name (the
    static_asserts of tests/simdriver check each against cudaTypedefs.h)."""
    rows = []
    with open(path) as f:
        text = f.read()
    for m in re.finditer(r"^SIM_CUDA_ENTRY\((\w+),\s*(\d+),\s*(\w*),\s*(\w+)\)", text, re.M):
        rows.append(SimRow(m.group(1), int(m.group(2)), m.group(3) != "", m.group(4)))
    return rows


def resolve(rows, request):
    """The exported name the driver hands out for a request, or None when the table lacks the
    symbol or every version of it is newer: the newest ABI not newer than cudaVersion; with the
    per-thread flag, the _ptsz/_ptds variant when it is at least as new as that ABI."""
    candidates = [r for r in rows if r.base == request.symbol and r.version <= request.version]
    default = max((r for r in candidates if not r.per_thread), key=lambda r: r.version, default=None)
    per_thread = max((r for r in candidates if r.per_thread), key=lambda r: r.version, default=None)
    chosen = default
    if request.flags & PER_THREAD_DEFAULT_STREAM and per_thread is not None and (
            default is None or per_thread.version >= default.version):
        chosen = per_thread
    return chosen.symbol if chosen else None
