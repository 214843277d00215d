"""Real TF32 vs the emulator on the four architectures (issue 36 item 3), run on a GPU.

Usage, on a CUDA machine with transformers: ``python benchmarks/tf32_architectures_gpu.py cuda
5`` writes ``$OUT/arch_gpu.json``: per architecture and seed, the relative change of logits,
loss and gradients at 'high' against float32 with real TF32, with the emulator on the GPU and
on the CPU, and float32 run twice (the noise floor).
"""

import json
import os
import sys
import time
import traceback

import torch
from eigprec_book.chapters.tf32 import architectures as arch

import eigprec

out = os.environ.get("OUT", ".")
os.makedirs(out, exist_ok=True)
dev = sys.argv[1] if len(sys.argv) > 1 else "cuda"
seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
rt = eigprec.describe_runtime()
result = {
    "runtime": rt.as_dict() if hasattr(rt, "as_dict") else str(rt),
    "torch": torch.__version__,
    "device": dev,
    "models": {},
}
result["emulator_rounding"] = eigprec.tf32.default_rounding()  # rna unless overridden
print(result["torch"], dev, torch.cuda.get_device_name() if dev == "cuda" else "cpu", flush=True)
t0 = time.perf_counter()
for name in arch.ARCHITECTURES:
    rows = []
    for seed in range(seeds):
        row = {"seed": seed}
        try:
            if dev == "cuda":
                row["real"] = arch.tf32_effects(name, seed, device=dev, emulated=False)
                row["emulated_gpu"] = arch.tf32_effects(
                    name, seed, device=dev, emulated=True, float64=False
                )["high"]
            row["emulated_cpu"] = arch.tf32_effects(
                name, seed, device="cpu", emulated=True, float64=False
            )["high"]
            # float32 against float32 on the same device: run-to-run noise
            model, batch = arch.build_architecture(name, seed)
            model = model.to(dev)
            batch = arch._to(batch, dev, torch.float32)
            a = arch._run(model, batch, arch._precision("float32", torch.device(dev), False, None))
            b = arch._run(model, batch, arch._precision("float32", torch.device(dev), False, None))
            row["fp32_repeat"] = arch._relative(b, a)
        except Exception:
            row["error"] = traceback.format_exc()
        rows.append(row)
        print(
            name, seed, json.dumps({k: v for k, v in row.items() if k != "seed"})[:600], flush=True
        )
    result["models"][name] = rows
result["seconds"] = time.perf_counter() - t0
json.dump(result, open(os.path.join(out, "arch_gpu.json"), "w"), indent=1)
print("seconds", result["seconds"])
