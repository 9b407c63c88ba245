"""Occupancy against values worked out by hand from cuda_occupancy.h's formulas; launch checks."""

import pytest

from agent_core.measure import hardware
from agent_core.measure.backend import Launch
from agent_core.measure.hardware import check_launch, occupancy, profile_for_arch, prune_reason
from agent_core.model import DeviceInfo, KerntuneError, Resources

H100 = profile_for_arch("sm_90")


@pytest.mark.parametrize("threads, regs, smem, expect", [
    # 8 warps; regs: 16384 // 1024 = 16 warps/sub-partition -> 64 // 8 = 8; warps 64 // 8 = 8 -> full
    (256, 32, 0, (8, 1.0, "warps")),
    # 128 regs: 4096 per warp -> 4 warps/sub-partition -> 16 // 8 = 2 blocks, 16 of 64 warps
    (256, 128, 0, (2, 0.25, "registers")),
    # 72 regs: 2304 per warp -> 7 per sub-partition -> 28 // 4 = 7 blocks of 4 warps
    (128, 72, 0, (7, 0.4375, "registers")),
    # 40 regs, 3 warps: 1280 per warp -> 12 -> 48 // 3 = 16 blocks (warps would allow 21)
    (96, 40, 0, (16, 0.75, "registers")),
    # 48 KB smem: roundup(49152 + 1024, 128) = 50176 -> 233472 // 50176 = 4 blocks
    (128, 32, 49152, (4, 0.25, "shared memory")),
    # 100000 B: roundup(101024, 128) = 101120 -> 2 blocks
    (256, 32, 100000, (2, 0.25, "shared memory")),
    # one warp per block: the 32-block limit -> 32 of 64 warps
    (32, 16, 0, (32, 0.5, "blocks")),
    # 1024 threads x 128 regs: 4096 x 32 warps = 131072 > 65536 registers per block
    (1024, 128, 0, (0, 0.0, "registers")),
    # more shared memory than the opt-in maximum (227 KB)
    (128, 32, 232449, (0, 0.0, "shared memory")),
    # more threads than a block may have
    (2048, 16, 0, (0, 0.0, "warps")),
])
def test_occupancy_sm90(threads, regs, smem, expect):
    assert occupancy(H100, threads, regs, smem) == expect


def test_occupancy_other_arches():
    a10 = profile_for_arch("sm_86")  # 48 warps, 16 blocks, 100 KB
    assert occupancy(a10, 256, 32, 0) == (6, 1.0, "warps")
    assert occupancy(a10, 64, 32, 0) == (16, 16 * 2 / 48, "blocks")
    # 40 KB: roundup(41984, 128) = 41984 -> 102400 // 41984 = 2
    assert occupancy(a10, 256, 32, 40 * 1024) == (2, 16 / 48, "shared memory")
    a100 = profile_for_arch("sm_80")
    # 164 KB per SM: 167936 // 50176 = 3
    assert occupancy(a100, 128, 32, 49152) == (3, 12 / 64, "shared memory")


def test_carveout_is_smallest_step_holding_the_blocks():
    # 4 blocks x 50176 B = 200704 B = exactly 196 KB; 3 x roundup(71024, 128) = 213120 B -> 228 KB
    assert hardware.smem_carveout(H100, 4, 49152) == 196 * 1024
    assert hardware.smem_carveout(H100, 3, 70000) == 228 * 1024
    # 2 blocks x 9216 -> 32 KB
    assert hardware.smem_carveout(H100, 2, 8192) == 32 * 1024
    assert hardware.smem_carveout(H100, 8, 0) == 8 * 1024
    assert hardware.smem_carveout(H100, 0, 0) == 0


def test_profiles():
    assert set(hardware.PROFILES) == {"sm_80", "sm_86", "sm_89", "sm_90"}
    assert H100.sm_count == 132 and H100.l2_bytes == 50 * 1024 * 1024
    d = DeviceInfo(name="x", arch="sm_90", sm_count=132)
    assert (H100.smem_per_sm, H100.smem_per_block_optin, H100.regs_per_sm) == (d.smem_per_sm, d.smem_per_block_optin,
                                                                             d.regs_per_sm)
    assert profile_for_arch("90").arch == "sm_90" and profile_for_arch("sm_90a").arch == "sm_90"
    assert profile_for_arch("compute_89").max_blocks_per_sm == 24
    profile_for_arch("sm_90").sm_count = 1  # a copy: the table is not changed
    assert hardware.PROFILES["sm_90"].sm_count == 132
    with pytest.raises(KerntuneError, match="sm_80, sm_86, sm_89, sm_90"):
        profile_for_arch("sm_70")


def L(grid=(1, 1, 1), block=(256, 1, 1), smem=0):
    return Launch(grid=grid, block=block, smem=smem)


R = Resources(registers=32, static_smem=0)


@pytest.mark.parametrize("launch, res, key, text", [
    (L(block=(2048, 1, 1)), R, "threads_per_block", "2048 threads per block"),
    (L(block=(4, 2, 128)), R, "block_dim", "block dimension z = 128 exceeds its limit of 64"),
    (L(block=(0, 1, 1)), R, "empty_launch", "block dimension x is 0"),
    (L(grid=(1, 70000, 1)), R, "grid_dim", "grid dimension y = 70000"),
    (L(), Resources(registers=32, static_smem=50000), "static_smem", "50000 bytes of static shared memory"),
    (L(smem=232000), Resources(registers=32, static_smem=1000), "total_smem", "233000 bytes"),
    (L(), Resources(registers=256, static_smem=0), "regs_per_thread", "256 registers per thread"),
    (L(block=(1024, 1, 1)), Resources(registers=255, static_smem=0), "regs_per_block", "262144 registers"),
    # 1000 threads x 65 regs = 65000 fits raw, but 32 warps x 2304 = 73728 allocated does not
    (L(block=(1000, 1, 1)), Resources(registers=65, static_smem=0), "regs_per_block", "73728"),
])
def test_check_launch_reasons(launch, res, key, text):
    k, msg = prune_reason(H100, launch, res)
    assert k == key and k in hardware.PRUNE_REASONS
    assert text in msg
    assert check_launch(H100, launch, res) == msg


def test_check_launch_ok_and_without_resources():
    assert check_launch(H100, L(grid=(2**31 - 1, 65535, 65535), block=(1024, 1, 1)), R) is None
    assert check_launch(H100, L(block=(1024, 1, 1)), Resources(registers=64, static_smem=0)) is None
    assert check_launch(H100, L(smem=232448), Resources(registers=32, static_smem=0)) is None
    # before compiling: the shape and the dynamic shared memory are still checked
    assert check_launch(H100, L(), None) is None
    assert "opt-in maximum" in check_launch(H100, L(smem=300000), None)
    assert "threads per block" in check_launch(H100, L(block=(32, 64, 1)), None)


def test_zero_occupancy_reason():
    # a device whose SM holds less shared memory than a block may ask for
    odd = DeviceInfo(name="odd", arch="sm_90", sm_count=1, smem_per_sm=64 * 1024)
    key, msg = prune_reason(odd, L(smem=100000), R)
    assert key == "zero_occupancy" and "shared memory" in msg


def test_resource_summary():
    s = hardware.resource_summary(H100, L(grid=(132 * 4, 1, 1), block=(256, 1, 1), smem=8192),
                                  Resources(registers=64, static_smem=4096, spill_stores=8, spill_loads=12))
    # 64 regs: 2048/warp -> 8 per sub-partition -> 32 // 8 = 4 blocks; smem 13312 -> 17 blocks
    assert (s["blocks_per_sm"], s["occupancy"], s["limiter"]) == (4, 0.5, "registers")
    assert s["smem_per_block"] == 12288 and s["spill_loads"] == 12 and s["problem"] is None
    assert s["waves"] == 1.0
    assert s["smem_carveout"] == 64 * 1024  # 4 x 13312 = 53248 B


H100_ATTRS = {  # cudaGetDeviceProperties / cuDeviceGetAttribute on an H100 80GB HBM3
    "MULTIPROCESSOR_COUNT": 132, "MAX_THREADS_PER_BLOCK": 1024, "MAX_THREADS_PER_MULTIPROCESSOR": 2048,
    "MAX_BLOCKS_PER_MULTIPROCESSOR": 32, "MAX_REGISTERS_PER_MULTIPROCESSOR": 65536,
    "MAX_REGISTERS_PER_BLOCK": 65536, "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": 233472,
    "MAX_SHARED_MEMORY_PER_BLOCK": 49152, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 232448,
    "RESERVED_SHARED_MEMORY_PER_BLOCK": 1024, "L2_CACHE_SIZE": 52428800, "WARP_SIZE": 32,
    "CLOCK_RATE": 1980000,
}


def test_device_info_from_attributes():
    d = hardware.device_info_from_attributes("NVIDIA H100 80GB HBM3", (9, 0), H100_ATTRS)
    assert d == DeviceInfo(name="NVIDIA H100 80GB HBM3", arch="sm_90", sm_count=132)
    small = hardware.device_info_from_attributes("card", (8, 6), {"MULTIPROCESSOR_COUNT": 28})
    assert small.sm_count == 28 and small.max_blocks_per_sm == 16 and small.arch == "sm_86"


@pytest.mark.gpu
def test_device_info_from_pycuda():
    import pycuda.driver as drv
    drv.init()
    dev = drv.Device(0)
    d = hardware.device_info_from_pycuda(dev)
    assert d.sm_count == dev.get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT)
    major, minor = dev.compute_capability()
    assert d.arch == f"sm_{major}{minor}"
    assert d.smem_per_block_optin >= d.smem_per_block and d.max_blocks_per_sm >= 16


def test_the_architecture_is_probed_with_nvidia_smi_before_any_cuda_context(tmp_path, monkeypatch):
    """probe_arch asks nvidia-smi (a stand-in script here) for the compute capability of the device the worker
    will use: CUDA_VISIBLE_DEVICES maps the index; no nvidia-smi, a failure or an odd answer give None."""
    from agent_core.measure import hardware as hw
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\necho "$@" >> "$(dirname "$0")/calls"\n'
                   'case "$*" in *"-i 3"*) echo "9.0";; *"-i GPU-abc"*) echo "8.6";; *) exit 6;; esac\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setattr(hw, "_ARCH_PROBES", {})
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert hw.probe_arch(3) == "sm_90"
    assert hw.probe_arch(3) == "sm_90" and len((tmp_path / "calls").read_text().splitlines()) == 1  # remembered
    assert hw.probe_arch(0) is None  # nvidia-smi failed
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-abc,3")
    assert hw.probe_arch(0) == "sm_86" and hw.probe_arch(1) == "sm_90" and hw.probe_arch(2) is None
    monkeypatch.setattr(hw, "_ARCH_PROBES", {})
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert hw.probe_arch(1) is None
