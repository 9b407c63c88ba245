"""Device profiles and limits, theoretical occupancy, and the pre-run check of a launch.

Occupancy follows CUDA's ``cuda_occupancy.h`` (CUDA 13.0) for compute capability 8.x/9.x: registers are
allocated per warp in units of 256 and per block in multiples of 4 warps (one per SM sub-partition),
shared memory per block in units of 128 B plus 1 KB reserved by the driver, at most ``max_blocks_per_sm``
blocks. pycuda's ``OccupancyRecord`` hard-codes 8 blocks per SM and is wrong on Hopper, so it is not used.
"""

from __future__ import annotations

from dataclasses import replace

from agent_core.measure.backend import Launch
from agent_core.model import DeviceInfo, KerntuneError, Resources

KB = 1024
MB = 1024 * 1024

MAX_BLOCK_DIM = (1024, 1024, 64)
MAX_GRID_DIM = (2**31 - 1, 65535, 65535)
REG_ALLOC_UNIT = 256  # registers, per warp
WARP_ALLOC_GRANULARITY = 4  # warps per block are counted in multiples of the 4 sub-partitions
SUB_PARTITIONS = 4
SMEM_ALLOC_UNIT = 128  # bytes
# shared-memory carveouts an SM can be configured to (the ones up to the device's smem_per_sm apply)
SMEM_CARVEOUTS_KB = (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)

PROFILES: dict[str, DeviceInfo] = {
    # A100-SXM4-80GB: 108 SMs, 40 MB L2; 164 KB smem/SM, 163 KB/block with opt-in; 32 blocks, 2048 threads/SM.
    "sm_80": DeviceInfo(name="NVIDIA A100-SXM4-80GB (profile)", arch="sm_80", sm_count=108,
                        smem_per_sm=164 * KB, smem_per_block_optin=163 * KB, l2_bytes=40 * MB),
    # A10 (GA102): 72 SMs, 6 MB L2; 100 KB smem/SM, 99 KB/block; 16 blocks, 1536 threads/SM.
    "sm_86": DeviceInfo(name="NVIDIA A10 (profile)", arch="sm_86", sm_count=72, max_threads_per_sm=1536,
                        max_blocks_per_sm=16, smem_per_sm=100 * KB, smem_per_block_optin=99 * KB, l2_bytes=6 * MB),
    # L40 / L40S (AD102): 142 SMs, 96 MB L2; 100 KB smem/SM, 99 KB/block; 24 blocks, 1536 threads/SM.
    # (RTX 4090: same limits, 128 SMs, 72 MB L2.)
    "sm_89": DeviceInfo(name="NVIDIA L40 (profile)", arch="sm_89", sm_count=142, max_threads_per_sm=1536,
                        max_blocks_per_sm=24, smem_per_sm=100 * KB, smem_per_block_optin=99 * KB, l2_bytes=96 * MB),
    # H100 SXM5 80GB: 132 SMs, 50 MB L2; 228 KB smem/SM, 227 KB/block; 32 blocks, 2048 threads/SM
    # (model.DeviceInfo's defaults are these).
    "sm_90": DeviceInfo(name="NVIDIA H100 80GB HBM3 (profile)", arch="sm_90", sm_count=132),
}
PROFILES_SOURCE = ("Per-SM limits: CUDA C++ Programming Guide, 'Technical Specifications per Compute Capability', "
                   "and cuda_occupancy.h (max blocks per SM, allocation granularities); SM counts and L2 sizes: "
                   "NVIDIA's A100, A10, L40 and H100 datasheets / whitepapers; H100 values match "
                   "cudaGetDeviceProperties on an H100 80GB HBM3.")

# What check_launch can say; keys name the reason, values are the message templates it formats.
PRUNE_REASONS: dict[str, str] = {
    "empty_launch": "{what} dimension {axis} is {value}: every grid and block dimension must be at least 1",
    "threads_per_block": "{threads} threads per block exceed the device maximum of {limit}",
    "block_dim": "block dimension {axis} = {value} exceeds its limit of {limit}",
    "grid_dim": "grid dimension {axis} = {value} exceeds its limit of {limit}",
    "static_smem": "{smem} bytes of static shared memory exceed the {limit}-byte (48 KB) static limit",
    "total_smem": "{smem} bytes of shared memory per block ({static} static + {dynamic} dynamic) exceed the "
                  "device's opt-in maximum of {limit} bytes",
    "regs_per_thread": "{regs} registers per thread exceed the maximum of {limit}",
    "regs_per_block": "{regs} registers x {threads} threads need {need} registers per block (allocated per "
                      "warp in units of 256, warps in groups of 4) but a block may have {limit}",
    "zero_occupancy": "not even one block fits on an SM (limited by {limiter})",
}


def profile_for_arch(arch: str) -> DeviceInfo:
    """The built-in profile of ``arch`` ("sm_90", "90", "9.0", "compute_90")."""
    a = arch.strip().lower().replace("compute_", "sm_")
    if not a.startswith("sm_"):
        a = "sm_" + a.replace(".", "")
    a = a.rstrip("a")  # sm_90a -> sm_90
    if a not in PROFILES:
        raise KerntuneError(f"no device profile for '{arch}' (known: {', '.join(PROFILES)}); "
                            "run on the GPU to read its limits, or use one of the known architectures")
    return replace(PROFILES[a])


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def smem_allocated(dev: DeviceInfo, smem_per_block: int) -> int:
    """Shared memory a block takes on an SM: its own plus the driver's reservation, in 128 B units."""
    return _round_up(smem_per_block + dev.reserved_smem_per_block, SMEM_ALLOC_UNIT)


def regs_allocated(dev: DeviceInfo, threads: int, regs_per_thread: int) -> int:
    """Registers a block of ``threads`` is checked against: per-warp units of 256, warps rounded up to 4."""
    warps = -(-threads // dev.warp_size)
    per_warp = _round_up(regs_per_thread * dev.warp_size, REG_ALLOC_UNIT)
    return per_warp * _round_up(warps, WARP_ALLOC_GRANULARITY)


def occupancy(dev: DeviceInfo, threads: int, regs_per_thread: int, smem_per_block: int) -> tuple[int, float, str]:
    """(blocks per SM, occupancy 0..1, limiting factor) of one kernel at a block size.

    ``smem_per_block`` is static + dynamic bytes. The shared-memory limit uses the SM's largest carveout
    (``smem_per_sm``), as cuda_occupancy.h does under the default carveout preference; the driver then
    configures the smallest carveout that holds that many blocks (``smem_carveout``). The limiter is the
    first of "warps", "registers", "shared memory", "blocks" whose limit equals the result."""
    max_warps = dev.max_threads_per_sm // dev.warp_size
    if threads <= 0 or threads > dev.max_threads_per_block:
        return 0, 0.0, "warps"
    warps = -(-threads // dev.warp_size)
    limits: dict[str, int] = {"warps": max_warps // warps}
    if regs_per_thread <= 0:
        limits["registers"] = dev.max_blocks_per_sm
    else:
        per_warp = _round_up(regs_per_thread * dev.warp_size, REG_ALLOC_UNIT)
        if (regs_per_thread > dev.max_regs_per_thread or per_warp * warps > dev.regs_per_block
                or regs_allocated(dev, threads, regs_per_thread) > dev.regs_per_block):
            limits["registers"] = 0
        else:
            warps_per_sub = (dev.regs_per_sm // SUB_PARTITIONS) // per_warp
            limits["registers"] = warps_per_sub * SUB_PARTITIONS // warps
    alloc = smem_allocated(dev, smem_per_block)
    if alloc > dev.smem_per_block_optin + dev.reserved_smem_per_block:
        limits["shared memory"] = 0
    else:
        limits["shared memory"] = dev.smem_per_sm // alloc
    limits["blocks"] = dev.max_blocks_per_sm
    blocks = min(limits.values())
    limiter = next(k for k, v in limits.items() if v == blocks)
    return blocks, blocks * warps / max_warps, limiter


def smem_carveout(dev: DeviceInfo, blocks: int, smem_per_block: int) -> int:
    """The smallest shared-memory carveout (bytes) that holds ``blocks`` blocks of ``smem_per_block``."""
    need = blocks * smem_allocated(dev, smem_per_block) if blocks else 0
    for kb in SMEM_CARVEOUTS_KB:
        if kb * KB >= need and kb * KB <= dev.smem_per_sm:
            return kb * KB
    return dev.smem_per_sm


def prune_reason(dev: DeviceInfo, launch: Launch, res: Resources | None) -> tuple[str, str] | None:
    """(key of PRUNE_REASONS, message) for the first limit ``launch`` breaks, or None.
    Without ``res`` (before compiling) only the launch's own shape and dynamic shared memory are checked."""
    def why(key: str, **kw) -> tuple[str, str]:
        return key, PRUNE_REASONS[key].format(**kw)

    for what, dims in (("block", launch.block), ("grid", launch.grid)):
        for axis, v in zip("xyz", dims):
            if v < 1:
                return why("empty_launch", what=what, axis=axis, value=v)
    if launch.threads > dev.max_threads_per_block:
        return why("threads_per_block", threads=launch.threads, limit=dev.max_threads_per_block)
    for axis, v, lim in zip("xyz", launch.block, MAX_BLOCK_DIM):
        if v > lim:
            return why("block_dim", axis=axis, value=v, limit=lim)
    for axis, v, lim in zip("xyz", launch.grid, MAX_GRID_DIM):
        if v > lim:
            return why("grid_dim", axis=axis, value=v, limit=lim)
    static = res.static_smem if res else 0
    if static > dev.smem_per_block:
        return why("static_smem", smem=static, limit=dev.smem_per_block)
    if static + launch.smem > dev.smem_per_block_optin:
        return why("total_smem", smem=static + launch.smem, static=static, dynamic=launch.smem,
                   limit=dev.smem_per_block_optin)
    if res is None:
        return None
    if res.registers > dev.max_regs_per_thread:
        return why("regs_per_thread", regs=res.registers, limit=dev.max_regs_per_thread)
    need = regs_allocated(dev, launch.threads, res.registers)
    if need > dev.regs_per_block:
        return why("regs_per_block", regs=res.registers, threads=launch.threads, need=need, limit=dev.regs_per_block)
    blocks, _, limiter = occupancy(dev, launch.threads, res.registers, static + launch.smem)
    if blocks == 0:
        return why("zero_occupancy", limiter=limiter)
    return None


def check_launch(dev: DeviceInfo, launch: Launch, res: Resources | None) -> str | None:
    """Why ``launch`` of a kernel using ``res`` cannot run on ``dev``, or None when it can."""
    r = prune_reason(dev, launch, res)
    return r[1] if r else None


def resource_summary(dev: DeviceInfo, launch: Launch, res: Resources) -> dict:
    """Registers, shared memory, spills and occupancy of one launch, for the UI."""
    smem = res.static_smem + launch.smem
    blocks, occ, limiter = occupancy(dev, launch.threads, res.registers, smem)
    grid_blocks = launch.grid[0] * launch.grid[1] * launch.grid[2]
    per_wave = blocks * dev.sm_count
    return {
        "registers": res.registers,
        "threads": launch.threads,
        "static_smem": res.static_smem,
        "dynamic_smem": launch.smem,
        "smem_per_block": smem,
        "stack_bytes": res.stack_bytes,
        "spill_stores": res.spill_stores,
        "spill_loads": res.spill_loads,
        "blocks_per_sm": blocks,
        "occupancy": occ,
        "limiter": limiter,
        "smem_carveout": smem_carveout(dev, blocks, smem),
        "waves": grid_blocks / per_wave if per_wave else None,
        "problem": check_launch(dev, launch, res),
    }


# --------------------------------------------------------------------------------------------- from a device
def device_info_from_attributes(name: str, compute_capability: tuple[int, int], attrs: dict[str, int]) -> DeviceInfo:
    """DeviceInfo from CUDA device attributes by their driver names (``MULTIPROCESSOR_COUNT``, ...);
    attributes a driver does not report fall back to the architecture's profile or model defaults."""
    arch = f"sm_{compute_capability[0]}{compute_capability[1]}"
    base = PROFILES.get(arch) or DeviceInfo(name=name, arch=arch, sm_count=0)
    fields = {
        "sm_count": "MULTIPROCESSOR_COUNT",
        "max_threads_per_block": "MAX_THREADS_PER_BLOCK",
        "max_threads_per_sm": "MAX_THREADS_PER_MULTIPROCESSOR",
        "max_blocks_per_sm": "MAX_BLOCKS_PER_MULTIPROCESSOR",
        "regs_per_sm": "MAX_REGISTERS_PER_MULTIPROCESSOR",
        "regs_per_block": "MAX_REGISTERS_PER_BLOCK",
        "smem_per_sm": "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
        "smem_per_block": "MAX_SHARED_MEMORY_PER_BLOCK",
        "smem_per_block_optin": "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
        "reserved_smem_per_block": "RESERVED_SHARED_MEMORY_PER_BLOCK",
        "l2_bytes": "L2_CACHE_SIZE",
        "warp_size": "WARP_SIZE",
    }
    kw = {f: int(attrs[a]) for f, a in fields.items() if a in attrs}
    return replace(base, name=name, arch=arch, copy_bandwidth_gbps=None, **kw)


def device_info_from_pycuda(device) -> DeviceInfo:
    """DeviceInfo of a ``pycuda.driver.Device`` (runs only where pycuda and a GPU are)."""
    attrs = {getattr(k, "name", str(k).rsplit(".", 1)[-1]): v for k, v in device.get_attributes().items()}
    return device_info_from_attributes(device.name(), tuple(device.compute_capability()), attrs)


# --------------------------------------------------------------------------------------------- before the worker
_ARCH_PROBES: dict[tuple[int, str], str | None] = {}


def probe_arch(device_index: int = 0) -> str | None:
    """The architecture (``sm_90``) of CUDA device ``device_index`` as the driver's ``nvidia-smi`` reports it,
    without a CUDA context: known before the GPU worker has started, so the original can compile while it starts.
    ``CUDA_VISIBLE_DEVICES`` is followed (an index into it, or its UUID); None where nvidia-smi is missing, fails
    or answers something else (the caller then waits for the worker's device). A hint only: the worker's own
    answer decides, and a mismatch costs one more compile. Remembered per process."""
    import os
    import shutil
    import subprocess
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    key = (device_index, visible or "")
    if key in _ARCH_PROBES:
        return _ARCH_PROBES[key]
    ident: str | None = str(device_index)
    if visible is not None:
        ids = [x.strip() for x in visible.split(",") if x.strip()]
        ident = ids[device_index] if 0 <= device_index < len(ids) else None
    arch = None
    exe = shutil.which("nvidia-smi")
    if exe and ident is not None:
        try:
            r = subprocess.run([exe, "--query-gpu=compute_cap", "--format=csv,noheader", "-i", ident],
                               capture_output=True, text=True, timeout=10)
            out = r.stdout.strip().splitlines()
            if r.returncode == 0 and len(out) == 1:
                major, _, minor = out[0].strip().partition(".")
                if major.isdigit() and minor.isdigit():
                    arch = f"sm_{int(major)}{int(minor)}"
        except (OSError, subprocess.SubprocessError):
            arch = None
    _ARCH_PROBES[key] = arch
    return arch
