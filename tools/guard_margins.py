"""The guard-margin report: every hidden guard of the book with the margin it stood on.

Each executed page appends its guards (``eigprec_book.helpers.guard``/``check``) to a JSON-lines
file of its own (``EIGPREC_GUARD_LOG``, set by ``execute_pages.py``). This module merges
those files into one report, ``_build/guard-margins.json``, with the configuration the
pages ran under, and prints the thinnest margins. ``robustness.py`` merges the reports of
several configurations.

Usage: ``python tools/guard_margins.py GUARD_DIR --out _build/guard-margins.json``
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
from pathlib import Path

#: Environment variables that change float32 arithmetic or the TF32 emulation.
CONFIG_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "ATEN_CPU_CAPABILITY",
    "MKL_ENABLE_INSTRUCTIONS",
    "MKL_CBWR",
    "OPENBLAS_CORETYPE",
    "EIGPREC_TF32_ROUNDING",
    "EIGPREC_SCALE",
    "EIGPREC_SEED_OFFSET",
    "TORCH_COMPILE_DISABLE",
)
THIN = 0.10
#: A count of chaotic runs (seeds) is thin when fewer runs than this would make it fail,
#: whatever its relative margin: "6 of 10 > half" stands one run from failing.
THIN_RUNS = 2


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def configuration(name: str = "default") -> dict:
    """The settings that can change what a page computes, as this process sees them."""
    config = {"name": name, "cpu": _cpu_model(), "cores": os.cpu_count()}
    config.update({v: os.environ[v] for v in CONFIG_VARS if v in os.environ})
    return config


def _float(x: object) -> float | None:
    if x is None:
        return None
    return float(x)  # "inf"/"nan" strings come back as floats too


def read_page(path: Path) -> list[dict]:
    """A page's guard rows (JSON lines), numbers as floats."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        for key in ("value", "bound", "margin", "runs_margin"):
            row[key] = _float(row.get(key))
        rows.append(row)
    return rows


def merge(guard_dir: Path, pages: list[str], config: dict) -> dict:
    """One report from the per-page files of ``guard_dir`` (pages without a file listed)."""
    rows, missing = [], []
    for page in pages:
        path = guard_dir / f"{page}.jsonl"
        if not path.is_file():
            missing.append(page)
            continue
        for row in read_page(path):
            rows.append({"page": page, **row})
    return {"configuration": config, "guards": rows, "pages_without_record": missing}


def thinnest(rows: list[dict], count: int = 10) -> list[dict]:
    """The rows with the smallest relative margin (counts of runs and rows without a margin
    left out: :func:`thinnest_counts` ranks the counts)."""
    with_margin = [r for r in rows if r.get("margin") is not None and r.get("runs_margin") is None]
    return sorted(with_margin, key=lambda r: r["margin"])[:count]


def thinnest_counts(rows: list[dict], count: int = 10) -> list[dict]:
    """The guards on counts of runs with the fewest runs of margin."""
    counts = [r for r in rows if r.get("runs_margin") is not None]
    return sorted(counts, key=lambda r: (r["runs_margin"], r.get("margin") or 0.0))[:count]


def is_thin(row: dict) -> bool:
    """Under 10 % of relative margin, or for a count of runs under :data:`THIN_RUNS` runs."""
    if row.get("runs_margin") is not None:
        return row["runs_margin"] < THIN_RUNS
    return row.get("margin") is not None and row["margin"] < THIN


def _runs(x: float) -> str:
    if math.isinf(x):
        return "cannot fail" if x > 0 else "cannot pass"
    n = int(x)
    return f"{n:+d} run" + ("" if abs(n) == 1 else "s")


def _fmt(x: float | None) -> str:
    if x is None:
        return "—"
    if math.isinf(x) or math.isnan(x):
        return str(x)
    return f"{x:.4g}"


def summary_lines(report: dict, count: int = 10) -> list[str]:
    """Human-readable lines: counts, failures and the ``count`` thinnest margins."""
    rows = report["guards"]
    failed = [r for r in rows if not r["passed"]]
    exact = sum(r["margin"] is None for r in rows)
    lines = [
        f"guard margins: {len(rows)} guards on {len({r['page'] for r in rows})} pages "
        f"({exact} without a margin: equalities, yes/no checks, exact bounds); "
        f"{len(failed)} failed"
    ]
    if report.get("pages_without_record"):
        lines.append(
            "  no guard record (page executed before records were kept, or failed): "
            + ", ".join(report["pages_without_record"])
        )
    lines.append(f"  the {count} thinnest margins:")
    for r in thinnest(rows, count):
        flag = "  THIN" if is_thin(r) else ""
        lines.append(
            f"  {r['margin']:+8.1%}  {r['page']}: {r['name']}  "
            f"({_fmt(r['value'])} {r['op']} {_fmt(r['bound'])}){flag}"
        )
    counts = thinnest_counts(rows, count)
    if counts:
        lines.append(f"  the {len(counts)} counts of runs with the fewest runs of margin:")
    for r in counts:
        flag = "  THIN" if is_thin(r) else ""
        lines.append(
            f"  {_runs(r['runs_margin']):>11}  {r['page']}: {r['name']}  "
            f"({_fmt(r['value'])} {r['op']} {_fmt(r['bound'])}){flag}"
        )
    for r in failed:
        lines.append(f"  FAILED  {r['page']}: {r['name']} ({_fmt(r['value'])} {r['op']} ...)")
    return lines


def write(report: dict, out: Path) -> None:
    """Write ``report`` as JSON (inf and NaN as strings, which JSON lacks)."""

    def clean(x: object) -> object:
        if isinstance(x, float) and not math.isfinite(x):
            return repr(x)
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list):
            return [clean(v) for v in x]
        return x

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(clean(report), indent=1) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("guard_dir", type=Path)
    parser.add_argument("--pages", nargs="+", required=True, help="page names (no suffix)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--config-name", default="default")
    args = parser.parse_args(argv)
    report = merge(args.guard_dir, args.pages, configuration(args.config_name))
    write(report, args.out)
    print("\n".join(summary_lines(report)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
