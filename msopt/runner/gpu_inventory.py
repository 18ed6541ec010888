"""The GPUs this process will see: CUDA_VISIBLE_DEVICES resolved (index, UUID or MIG), with each one's memory and UUID.

Two sources, the first that answers wins:

1. the CUDA driver itself, asked from a short subprocess through ctypes (``cuDeviceGetCount``,
   ``cuDeviceTotalMem_v2``, ``cuDeviceGetUuid``): it applies CUDA_VISIBLE_DEVICES and
   CUDA_DEVICE_ORDER exactly as TensorFlow's CUDA runtime will. The total memory is asked
   without creating a context (``cuMemGetInfo`` would need one: memory claimed, and an MPS
   client attached), so the answer is the device's size, not what other processes left free;
   the subprocess gets an empty MPS pipe directory, so it never joins an MPS daemon;
2. ``nvidia-smi`` (``--query-gpu=index,uuid,name,pci.bus_id,memory.total`` and ``-L`` for MIG
   devices), with CUDA_VISIBLE_DEVICES resolved here the way the CUDA documentation describes:
   entries are indices in CUDA's order, ``GPU-`` UUIDs (or unique prefixes) or ``MIG-`` UUIDs,
   and the first entry that names no device hides it and every entry after it.

CUDA's order is PCI bus order with CUDA_DEVICE_ORDER=PCI_BUS_ID (msopt run sets it unless the
user did, so that --gpus uses nvidia-smi's numbering) and fastest-first by default. From
nvidia-smi the fastest-first order is only known when every GPU is the same model (ties keep
PCI order); otherwise an index entry gets the smallest memory of the candidates and no UUID.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from msopt.errors import InputError

SMI = "nvidia-smi"
NA = "[N/A]"
QUERY = "index,uuid,name,pci.bus_id,memory.total"
MIG_LINE = re.compile(r"^\s*MIG\s+(?P<profile>\S+)\s+Device\s+(?P<device>\d+):\s+\(UUID:\s*(?P<uuid>[^)]+)\)")
GPU_LINE = re.compile(r"^GPU\s+(?P<index>\d+):.*\(UUID:\s*(?P<uuid>[^)]+)\)")
PROFILE_MEMORY = re.compile(r"\.(\d+)gb$")

# Runs in a subprocess: a driver crash or hang cannot take msopt down, and this process's CUDA
# state stays untouched until TensorFlow initializes it.
DRIVER_PROBE = r"""
import ctypes, json
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    print(json.dumps({"error": "libcuda.so.1: " + str(e)})); raise SystemExit(0)
def check(code, what):
    if code != 0:
        print(json.dumps({"error": "%s returned CUDA error %d" % (what, code)})); raise SystemExit(0)
check(cuda.cuInit(0), "cuInit")
count = ctypes.c_int()
check(cuda.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
devices = []
uuid_fn = getattr(cuda, "cuDeviceGetUuid_v2", None) or cuda.cuDeviceGetUuid
for ordinal in range(count.value):
    dev = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(dev), ordinal), "cuDeviceGet")
    total = ctypes.c_size_t()
    check(cuda.cuDeviceTotalMem_v2(ctypes.byref(total), dev), "cuDeviceTotalMem_v2")
    uuid = (ctypes.c_ubyte * 16)()
    check(uuid_fn(uuid, dev), "cuDeviceGetUuid")
    name = ctypes.create_string_buffer(256)
    check(cuda.cuDeviceGetName(name, 256, dev), "cuDeviceGetName")
    devices.append({"ordinal": ordinal, "uuid_hex": bytes(uuid).hex(), "memory_mb": total.value // (1 << 20),
                    "name": name.value.decode(errors="replace")})
print(json.dumps({"devices": devices}))
"""


@dataclass
class VisibleGpu:
    """One device CUDA will show this process, at ``ordinal`` (TensorFlow's physical GPU index)."""

    ordinal: int
    entry: str  # the CUDA_VISIBLE_DEVICES entry naming it ('' when the variable is unset)
    uuid: str  # 'GPU-...' or 'MIG-...'; None when not known for sure
    memory_mb: int  # None when the source reports [N/A]
    name: str
    source: str  # 'cuda-driver' or 'nvidia-smi'
    note: str = ""


def nvidia_smi(*args):
    """stdout lines of nvidia-smi, or InputError naming what is missing."""
    path = shutil.which(SMI)
    if path is None:
        raise InputError(f"no NVIDIA GPU: {SMI} is not on PATH (install the NVIDIA driver)")
    try:
        done = subprocess.run([path, *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise InputError(f"{SMI} failed: {e}") from None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise InputError(
            f"no usable NVIDIA GPU: {SMI} {' '.join(args)} failed: {detail[0] if detail else done.returncode}"
        )
    return [line.rstrip() for line in done.stdout.splitlines() if line.strip()]


def _field(value):
    value = value.strip()
    return None if value in (NA, "[Not Supported]", "N/A", "") else value


def physical_gpus():
    """Every GPU nvidia-smi lists: [{index, uuid, name, pci, memory_mb, migs: [{uuid, profile, memory_mb}]}]."""
    gpus = []
    for line in nvidia_smi(f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"):
        parts = line.split(",")
        if len(parts) < 5 or not parts[0].strip().isdigit():
            raise InputError(f"{SMI} --query-gpu={QUERY}: unexpected line '{line.strip()}'")
        name = _field(",".join(parts[2:-2]))  # a name could hold a comma; the other fields cannot
        uuid, pci, memory = _field(parts[1]), _field(parts[-2]), _field(parts[-1])
        try:
            memory_mb = int(float(memory)) if memory is not None else None
        except ValueError:
            memory_mb = None
        gpus.append(
            {
                "index": int(parts[0]),
                "uuid": uuid,
                "name": name or "",
                "pci": pci or "",
                "memory_mb": memory_mb,
                "migs": [],
            }
        )
    by_index = {g["index"]: g for g in gpus}
    parent = None
    for line in nvidia_smi("-L"):
        gpu, mig = GPU_LINE.match(line), MIG_LINE.match(line)
        if gpu:
            parent = by_index.get(int(gpu["index"]))
        elif mig and parent is not None:
            size = PROFILE_MEMORY.search(mig["profile"])
            parent["migs"].append(
                {
                    "uuid": mig["uuid"].strip(),
                    "profile": mig["profile"],
                    "memory_mb": int(size.group(1)) * 1000 if size else None,
                }
            )
    return gpus


def cuda_order(gpus, order=None):
    """(the GPUs in CUDA's enumeration order, whether that order is certain)."""
    order = (order or os.environ.get("CUDA_DEVICE_ORDER") or "FASTEST_FIRST").upper()
    by_pci = sorted(gpus, key=lambda g: (g["pci"], g["index"]))
    if order == "PCI_BUS_ID" or len({g["name"] for g in gpus}) <= 1:
        return by_pci, True
    return by_pci, False


def resolve_visible(spec, gpus, order=None):
    """The devices CUDA shows for CUDA_VISIBLE_DEVICES=``spec`` (None: unset) over nvidia-smi's ``gpus``."""
    ordered, certain = cuda_order(gpus, order)
    if spec is None:
        entries = [str(k) for k in range(len(ordered))]
    else:
        entries = [e.strip() for e in spec.split(",")] if spec.strip() else []
    visible = []
    for entry in entries:
        found = _resolve_entry(entry, ordered, certain)
        if found is None:
            break  # CUDA: an entry naming no device hides it and every entry after it
        uuid, memory, name, note = found
        visible.append(VisibleGpu(len(visible), "" if spec is None else entry, uuid, memory, name, "nvidia-smi", note))
    return visible


def _resolve_entry(entry, ordered, certain):
    if entry.isdigit():
        k = int(entry)
        if k >= len(ordered):
            return None
        gpu = ordered[k]
        if gpu["migs"]:
            smallest = min((m for m in gpu["migs"]), key=lambda m: m["memory_mb"] or 0)
            return (
                None,
                smallest["memory_mb"],
                gpu["name"],
                "MIG enabled: CUDA shows one of its MIG devices; memory of the smallest, from its profile name",
            )
        if certain:
            return gpu["uuid"], gpu["memory_mb"], gpu["name"], ""
        known = [g["memory_mb"] for g in ordered if g["memory_mb"] is not None]
        return (
            None,
            min(known) if len(known) == len(ordered) else None,
            gpu["name"],
            "CUDA_DEVICE_ORDER=FASTEST_FIRST over different GPU models: order unknown, smallest memory assumed",
        )
    upper = entry.upper()
    if upper.startswith("MIG-"):
        for gpu in ordered:
            for mig in gpu["migs"]:
                if mig["uuid"].upper() == upper or mig["uuid"].upper().startswith(upper):
                    return (
                        mig["uuid"],
                        mig["memory_mb"],
                        f"{gpu['name']} MIG {mig['profile']}",
                        "MIG memory from its profile name (nominal GB)",
                    )
        return None
    if upper.startswith("GPU-"):
        matches = [g for g in ordered if (g["uuid"] or "").upper().startswith(upper)]
        if len(matches) != 1:
            return None  # unknown or ambiguous prefix
        gpu = matches[0]
        return gpu["uuid"], gpu["memory_mb"], gpu["name"], ""
    return None


def driver_gpus(timeout=60):
    """The visible devices as the CUDA driver reports them, or None when it cannot be asked (no libcuda)."""
    # cuInit connects to a running MPS control daemon: an empty pipe directory keeps the probe from becoming
    # an MPS client (and from the daemon's remapped device numbering). cuDeviceTotalMem needs no context.
    with tempfile.TemporaryDirectory(prefix="msopt-no-mps-") as no_mps:
        env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": no_mps}
        try:
            done = subprocess.run(
                [sys.executable, "-c", DRIVER_PROBE], capture_output=True, text=True, timeout=timeout, env=env
            )
            answer = json.loads(done.stdout.strip().splitlines()[-1])
        except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
            return None
    if "devices" not in answer:
        return None
    spec = os.environ.get("CUDA_VISIBLE_DEVICES")
    entries = [e.strip() for e in spec.split(",")] if spec else []
    result = []
    for d in answer["devices"]:
        h = d["uuid_hex"]
        entry = entries[d["ordinal"]] if d["ordinal"] < len(entries) else ""
        prefix = "MIG-" if entry.upper().startswith("MIG-") else "GPU-"
        uuid = f"{prefix}{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
        result.append(VisibleGpu(d["ordinal"], entry, uuid, int(d["memory_mb"]), d["name"], "cuda-driver"))
    return result


def visible_gpus():
    """The GPUs this process will see, in TensorFlow's physical order; [] when there is no NVIDIA driver."""
    found = driver_gpus()
    if found is not None:
        return found
    if shutil.which(SMI) is None:
        return []
    try:
        gpus = physical_gpus()
    except InputError:
        return []
    return resolve_visible(os.environ.get("CUDA_VISIBLE_DEVICES"), gpus)


def memory_mb(count):
    """Total memory (MB) of the first ``count`` visible GPUs; InputError naming a GPU whose size is unknown."""
    gpus = visible_gpus()
    if len(gpus) < count:
        raise InputError(
            f"the GPU memory could not be read: {len(gpus)} GPU(s) found by the driver or {SMI}, "
            f"TensorFlow sees {count} (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})"
        )
    totals = []
    for gpu in gpus[:count]:
        if gpu.memory_mb is None:
            raise InputError(
                f"the memory of GPU {gpu.ordinal} ({gpu.entry or gpu.name}) is reported as {NA}"
                f"{' (' + gpu.note + ')' if gpu.note else ''}; pass --allow-growth with one stream "
                f"per GPU, or name the GPU by UUID in --gpus/CUDA_VISIBLE_DEVICES"
            )
        totals.append(gpu.memory_mb)
    return totals


def uuids_for(indices):
    """The UUIDs of the GPUs that CUDA indices (``--gpus 1,2``) name; InputError when one is not known for sure."""
    saved = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(indices)
    try:
        gpus = visible_gpus()
    finally:
        if saved is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved
    if len(gpus) < len(indices):
        raise InputError(f"--gpus {','.join(indices)}: only {len(gpus)} of these GPUs exist")
    unknown = [g for g in gpus if g.uuid is None]
    if unknown:
        raise InputError(
            f"--gpus {','.join(indices)}: the UUID of GPU index {unknown[0].entry} is not known for sure "
            f"({unknown[0].note}); set CUDA_DEVICE_ORDER=PCI_BUS_ID"
        )
    return [g.uuid for g in gpus]


def compute_capabilities():
    """{nvidia-smi index: major compute capability}, {} when the driver cannot report it (older than r510)."""
    try:
        lines = nvidia_smi("--query-gpu=index,compute_cap", "--format=csv,noheader,nounits")
    except InputError:
        return {}
    result = {}
    for line in lines:
        index, _, cap = line.partition(",")
        cap = _field(cap)
        if index.strip().isdigit() and cap and cap.split(".")[0].isdigit():
            result[int(index)] = int(cap.split(".")[0])
    return result
