"""kerntune's two compile paths side by side (agent_core.measure.nvrtc, agent_core.measure.compiler): every kernel
with a spec (bench, corpus, examples, style kernels) compiled at its original configuration by NVRTC (where the
path serves it) and by nvcc, each into an empty cache, in parallel (one compile a CPU); printed: how many NVRTC
serves, the compile time of each path, and whether the kernel's SASS is the same instruction for instruction
(cuobjdump; skipped where it is missing) and its registers.

    python bench/nvrtc_vs_nvcc.py OUT.json        (needs nvcc and an NVRTC of its major version)
"""
import glob, json, os, re, shutil, subprocess, sys, tempfile, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from agent_core.source import spec as S
from agent_core.source.cuda_parse import parse_cuda
from agent_core.measure import compiler as C, nvrtc

nv = C.nvcc_path(); print("nvcc", C.nvcc_version().splitlines()[-1] if nv else None, "nvrtc", nvrtc.available(nv), flush=True)
files = sorted(glob.glob("bench/*.cu") + glob.glob("bench/corpus/*/*.cu") + glob.glob("examples/*.cu") + glob.glob("tests/data/cu/styles/*.cu"))
jobs = []
for f in files:
    text = Path(f).read_text(); cf = parse_cuda(text, f)
    for k in cf.kernels:
        sp = S.find_spec(cf, k.name)
        if sp is not None:
            jobs.append((f, text, k.name, S.instantiation(sp, k)))

def sass(cubin, sym):
    if shutil.which("cuobjdump") is None:
        return None
    out = subprocess.run(["cuobjdump", "-sass", "-fun", sym, cubin], capture_output=True, text=True).stdout
    return [re.sub(r"/\*[0-9a-f]{4}\*/", "", l).strip() for l in out.splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", l)]

root = Path(tempfile.mkdtemp())
def one(i):
    f, text, k, targs = jobs[i]
    row = {"file": f, "kernel": k}
    for mode in ("nvrtc", "nvcc"):
        t = time.perf_counter()
        try:
            # an extra flag keeps a compile off the NVRTC path: the nvcc column is nvcc's
            extra = () if mode == "nvrtc" else ("-DKT_NVCC_ONLY=1",)
            c = C._compile_kernel(text, k, "sm_90", None, [str(Path(f).parent)], root / mode / str(i), extra, targs,
                                  f, 300.0)
            row[mode] = {"s": round(time.perf_counter() - t, 3), "via": "nvrtc" if Path(c.cubin_path).name.startswith("r") else "nvcc",
                         "regs": c.resources.registers, "smem": c.resources.static_smem, "cubin": c.cubin_path, "sym": c.symbol}
        except Exception as e:
            row[mode] = {"s": round(time.perf_counter() - t, 3), "error": str(e)[:300]}
    a, b = row["nvrtc"], row["nvcc"]
    if a.get("via") == "nvrtc" and "cubin" in b:
        sa, sb = sass(a["cubin"], a["sym"]), sass(b["cubin"], b["sym"])
        row["sass_same"] = (sa == sb) if sa is not None else None; row["sass_len"] = (len(sa), len(sb)) if sa is not None else None
    return row
t0 = time.perf_counter()
with ThreadPoolExecutor(os.cpu_count()) as ex:
    rows = list(ex.map(one, range(len(jobs))))
wall = time.perf_counter() - t0
Path(sys.argv[1]).write_text(json.dumps(rows, indent=1))
served = [r for r in rows if r["nvrtc"].get("via") == "nvrtc"]
print(f"{len(rows)} kernels in {wall:.0f} s: NVRTC served {len(served)}, nvcc {sum(r['nvrtc'].get('via') == 'nvcc' for r in rows)}, errors {sum('error' in r['nvrtc'] for r in rows)} (nvcc alone errors {sum('error' in r['nvcc'] for r in rows)})")
print(f"SASS the same: {sum(bool(r.get('sass_same')) for r in served)} of {len(served)}; registers the same: {sum(r['nvrtc'].get('regs') == r['nvcc'].get('regs') for r in served)}")
ta = sum(r['nvrtc']['s'] for r in served); tb = sum(r['nvcc']['s'] for r in served)
print(f"compile time of the kernels NVRTC served: {ta:.1f} s against nvcc's {tb:.1f} s ({tb / max(ta, 1e-9):.1f}x); median {sorted(r['nvrtc']['s'] for r in served)[len(served)//2]:.3f} s against {sorted(r['nvcc']['s'] for r in served)[len(served)//2]:.3f} s")
for r in served:
    if not r.get("sass_same"):
        print("  differs:", r["file"], r["kernel"], r.get("sass_len"), r["nvrtc"].get("regs"), r["nvcc"].get("regs"))
