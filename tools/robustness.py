"""Execute every page under several configurations of the arithmetic; merge the margins.

A chapter's guard is a claim about every machine a reader builds on. Thread counts,
instruction sets and BLAS kernels change the order of float32 sums, and the TF32 rule
(ties away or to even) changes the emulator's rounding; through a chaotic quantity that
moves a printed number a lot. This runs ``execute_pages.py`` once per configuration, each
in a cache of its own, and merges the guard-margin reports into ``OUT/report.json`` (every
guard with its value and margin in each configuration) and ``OUT/report.md`` (worst
margin per guard, thinnest first). It fails on any guard that fails in any configuration
and lists the guards whose worst margin is under 10 % without an exact bound.

Usage: ``python tools/robustness.py --out _build/robustness [--configs NAME ...]``
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import guard_margins

ROOT = Path(__file__).resolve().parents[1]
CORES = str(os.cpu_count() or 1)

#: name -> environment. Each changes what float32 arithmetic a page meets, as another
#: machine would: thread count (OpenMP splits of sums), ATen's kernels (no AVX2/AVX-512),
#: MKL's code path and its reproducible mode (torch's CPU build links MKL), and the TF32
#: rounding rule the emulator applies ("rne": what the H100 and H200 measured do).
CONFIGS: dict[str, dict[str, str]] = {
    "one-thread": {"OMP_NUM_THREADS": "1"},
    "all-cores": {"OMP_NUM_THREADS": CORES},
    # Inductor's C++ build fails under ATEN_CPU_CAPABILITY=default here (seen: the library's
    # compiled SOAP step, CppCompileError): compiled code runs eagerly in this one.
    "aten-default": {
        "OMP_NUM_THREADS": "1",
        "ATEN_CPU_CAPABILITY": "default",
        "TORCH_COMPILE_DISABLE": "1",
    },
    "mkl-sse42": {"OMP_NUM_THREADS": "1", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
    "mkl-cbwr": {"OMP_NUM_THREADS": "1", "MKL_CBWR": "COMPATIBLE"},
    "rounding-rne": {"OMP_NUM_THREADS": "1", "EIGPREC_TF32_ROUNDING": "rne"},
    # A chaotic run on another CPU is a run with other seeds (issue 45): every seed of every
    # page shifted (eigprec_book.helpers.seeds), so no claim rests on seeds 0-4 alone.
    "seeds-1000": {"OMP_NUM_THREADS": "1", "EIGPREC_SEED_OFFSET": "1000"},
    "seeds-2000": {"OMP_NUM_THREADS": "1", "EIGPREC_SEED_OFFSET": "2000"},
}
#: What `make robustness` runs: one configuration of each kind (MKL_CBWR=COMPATIBLE already
#: takes MKL off its AVX2/AVX-512 kernels; mkl-sse42 is there to ask for by name) and two
#: seed sets.
DEFAULT_CONFIGS = (
    "one-thread",
    "all-cores",
    "aten-default",
    "mkl-cbwr",
    "rounding-rne",
    "seeds-1000",
    "seeds-2000",
)
THIN = 0.10
#: A count of runs is thin under this many runs of margin, whatever its relative margin.
THIN_RUNS = guard_margins.THIN_RUNS


def run_config(name: str, env_extra: dict[str, str], args: argparse.Namespace) -> dict:
    """Execute every page under one configuration; its margin report (read back)."""
    folder = args.out / name
    margins = folder / "guard-margins.json"
    env = {k: v for k, v in os.environ.items() if k not in guard_margins.CONFIG_VARS}
    env.update(env_extra)
    # A failing guard is recorded and the page goes on, so every guard is measured in
    # every configuration; this run fails afterwards on any failed record.
    env["EIGPREC_GUARD_MEASURE_ONLY"] = "1"
    cmd = [
        sys.executable,
        str(ROOT / "tools" / "execute_pages.py"),
        "--config", str(args.config),
        "--toc", str(args.toc),
        "--cache", str(folder / ".jupyter_cache"),
        "--guards", str(folder / "guards"),
        "--margins", str(margins),
        "--config-name", name,
    ]  # fmt: skip
    if args.jobs:
        cmd += ["--jobs", str(args.jobs)]
    # Slower configurations (ATen's baseline kernels, MKL's SSE path) must not fail on the
    # build's per-cell time limit: this run measures margins, not speed.
    cmd += ["--timeout", str(args.timeout)]
    if args.fresh:
        subprocess.run(["rm", "-rf", str(folder)], check=True)
    started = time.monotonic()
    print(f"robustness: {name} ({' '.join(f'{k}={v}' for k, v in env_extra.items())})")
    proc = subprocess.run(cmd, env=env, cwd=ROOT, check=False)
    seconds = time.monotonic() - started
    report = json.loads(margins.read_text()) if margins.is_file() else {"guards": []}
    report["exit_status"] = proc.returncode
    report["seconds"] = round(seconds, 1)
    return report


def _num(x: object) -> float | None:
    return None if x is None else float(x)


def merge(reports: dict[str, dict]) -> list[dict]:
    """One row per (page, guard): value and margin in each configuration, the worst margin."""
    rows: dict[tuple[str, str], dict] = {}
    for config, report in reports.items():
        seen: dict[tuple[str, str], int] = {}
        for g in report["guards"]:
            key0 = (g["page"], g["name"])
            # A name used twice on a page (a guard in a loop) keeps its occurrences apart.
            seen[key0] = seen.get(key0, 0) + 1
            key = key0 if seen[key0] == 1 else (g["page"], f"{g['name']} #{seen[key0]}")
            row = rows.setdefault(
                key,
                {"page": key[0], "name": key[1], "op": g["op"], "bound": _num(g["bound"]),
                 "exact": g.get("exact", ""), "values": {}, "margins": {}, "runs": {},
                 "failed_in": []},
            )  # fmt: skip
            row["values"][config] = _num(g["value"])
            row["margins"][config] = _num(g["margin"])
            if g.get("runs_margin") is not None:
                row["runs"][config] = _num(g["runs_margin"])
            if not g["passed"]:
                row["failed_in"].append(config)
    for row in rows.values():
        margins = [m for m in row["margins"].values() if m is not None]
        row["worst_margin"] = min(margins) if margins else None
        row["worst_runs"] = min(row["runs"].values()) if row["runs"] else None
        values = [v for v in row["values"].values() if v is not None]
        row["spread"] = max(values) / min(values) if values and min(values) > 0 else None
    return sorted(rows.values(), key=lambda r: (r["worst_margin"] is None, r["worst_margin"]))


def _f(x: float | None) -> str:
    if x is None:
        return "—"
    if isinstance(x, float) and (math.isinf(x) or math.isnan(x)):
        return str(x)
    return f"{x:.4g}"


def markdown(rows: list[dict], reports: dict[str, dict]) -> str:
    configs = list(reports)
    lines = [
        "# Guard margins across configurations",
        "",
        "| configuration | exit | seconds | guards |",
        "|---|---|---|---|",
    ]
    for c, r in reports.items():
        lines.append(f"| {c} | {r['exit_status']} | {r['seconds']} | {len(r['guards'])} |")
    lines += [
        "",
        "Worst relative margin of each guard with a margin, thinnest first; then the "
        "value in each configuration.",
        "",
        "| worst margin | page | guard | op bound | " + " | ".join(configs) + " |",
        "|---|---|---|---|" + "---|" * len(configs),
    ]
    for r in rows:
        if r["worst_margin"] is None:
            continue
        vals = " | ".join(_f(r["values"].get(c)) for c in configs)
        lines.append(
            f"| {r['worst_margin']:+.1%} | {r['page']} | {r['name']} | "
            f"{r['op']} {_f(r['bound'])} | {vals} |"
        )
    counts = sorted((r for r in rows if r["worst_runs"] is not None), key=lambda r: r["worst_runs"])
    if counts:
        lines += [
            "",
            "Counts of chaotic runs, by the fewest runs of margin in any configuration "
            f"(under {THIN_RUNS} is thin, whatever the relative margin).",
            "",
            "| runs | page | guard | op bound | " + " | ".join(configs) + " |",
            "|---|---|---|---|" + "---|" * len(configs),
        ]
        for r in counts:
            vals = " | ".join(_f(r["values"].get(c)) for c in configs)
            lines.append(
                f"| {_f(r['worst_runs'])} | {r['page']} | {r['name']} | "
                f"{r['op']} {_f(r['bound'])} | {vals} |"
            )
    exact = [r for r in rows if r["worst_margin"] is None]
    lines += ["", f"{len(exact)} guards without a margin (equalities, yes/no checks, exact)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=ROOT / "_config.yml")
    parser.add_argument("--toc", type=Path, default=ROOT / "_toc.yml")
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "robustness")
    parser.add_argument(
        "--configs", nargs="+", default=list(DEFAULT_CONFIGS), choices=list(CONFIGS)
    )
    parser.add_argument("--jobs", type=int, default=0)
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per cell")
    parser.add_argument(
        "--keep-cache", dest="fresh", action="store_false",
        help="reuse each configuration's execution cache (default: execute afresh)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    reports = {name: run_config(name, CONFIGS[name], args) for name in args.configs}
    rows = merge(reports)
    args.out.mkdir(parents=True, exist_ok=True)
    guard_margins.write({"configurations": reports, "guards": rows}, args.out / "report.json")
    (args.out / "report.md").write_text(markdown(rows, reports), encoding="utf-8")
    failed = [r for r in rows if r["failed_in"]]
    thin = [
        r
        for r in rows
        if (r["worst_runs"] is not None and r["worst_runs"] < THIN_RUNS)
        or (r["worst_runs"] is None and r["worst_margin"] is not None and r["worst_margin"] < THIN)
    ]
    broken = [c for c, r in reports.items() if r["exit_status"] != 0]
    print(f"robustness: {len(rows)} guards in {len(reports)} configurations")
    for r in thin:
        size = (
            f"{r['worst_runs']:+.0f} runs"
            if r["worst_runs"] is not None
            else f"{r['worst_margin']:+.1%}"
        )
        print(f"  thin  {size}  {r['page']}: {r['name']}")
    for r in failed:
        print(f"  FAILED in {', '.join(r['failed_in'])}: {r['page']}: {r['name']}")
    for c in broken:
        print(f"  configuration {c}: execute_pages exited {reports[c]['exit_status']}")
    print(f"robustness: report in {args.out / 'report.md'}")
    return 1 if failed or broken else 0


if __name__ == "__main__":
    sys.exit(main())
