"""Execute the book's notebook pages in parallel into the build's execution cache.

`make strict-book` empties the execution cache, then runs this before jupyter-book, so
the build finds every page already executed (MyST-NB's ``cache`` mode matches a cached
notebook by its code cells) instead of executing them one after another. On a 2-core
machine two kernels of one thread each take about half the time of one kernel after
another: the chapters' matrices are small and gain little from a second thread.

Each page (a MyST Markdown notebook, read as MyST-NB reads it: tools/book_pages.py) runs
exactly as MyST-NB runs it in the build (jupyter-cache's ``single_nb_execution``, in the
page's own folder, the configured per-cell timeout, errors not allowed) and is stored the
way MyST-NB stores it, with MyST-NB's reader named in its project record. A page that fails is
reported with its traceback and the exit status is 1; its cache entry is not written,
so a later `make book` would execute it again and show the same error. A page whose
code cells match a cached execution is not run again (`make book` uses this too; the
Makefile empties the cache when src/, book/data/ or the requirements change).

Usage: ``python tools/execute_pages.py --config _config.yml --toc _toc.yml
--cache _build/.jupyter_cache [--jobs N]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import guard_margins
from book_pages import read_page, toc_pages
from schedule import load_times, page_order, plan

#: Threads of torch (OpenMP) per kernel unless OMP_NUM_THREADS says otherwise. Fixed, not
#: "the cores over the pages left to run": a thread count changes float32 results (the
#: order of a product's sums), so a page must compute the same numbers whether it runs
#: alone or beside others, under `make book` or `make test` (issue 32).
KERNEL_THREADS = "1"

ROOT = Path(__file__).resolve().parents[1]
#: How MyST-NB names its reader of text notebooks to jupyter-cache (``jcache.readers``
#: entry point), so that a project record written here reads the page as MyST-NB's does.
MYST_READER = {"type": "plugin", "name": "myst_nb_md"}


def toc_notebooks(toc_path: Path) -> list[Path]:
    """Every notebook page the table of contents lists, sections included, in order."""
    return toc_pages(toc_path)


def _execute(
    path: str, timeout: int, guard_log: str | None = None
) -> tuple[str, object, float, str | None]:
    from jupyter_cache.executors.utils import single_nb_execution

    if guard_log is not None:
        # The kernel inherits this process's environment: its guards append to this file.
        Path(guard_log).unlink(missing_ok=True)
        os.environ["EIGPREC_GUARD_LOG"] = guard_log
    from jupyter_client.manager import KernelManager

    nb = read_page(Path(path))
    # IPC sockets in a folder of this kernel's own: kernels started at once over TCP can be
    # handed the same free port, and one then dies at start-up ("Address already in use").
    with tempfile.TemporaryDirectory(prefix="eigprec-kernel-") as sockets:
        km = KernelManager(transport="ipc", ip=os.path.join(sockets, "k"))
        try:
            result = single_nb_execution(
                nb,
                cwd=str(Path(path).parent),
                timeout=timeout,
                allow_errors=False,
                meta_override=True,
                km=km,
            )
        finally:
            # nbclient leaves a kernel it was handed running: stop it with its page.
            if km.has_kernel:
                km.shutdown_kernel(now=True)
            km.cleanup_resources()
    return path, nb, result.time, result.exc_string if result.err is not None else None


def _is_cached(cache, page: Path) -> bool:
    """Whether the cache holds this page executed with its current code cells."""
    try:
        cache.match_cache_notebook(read_page(page))
    except KeyError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    import yaml
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=ROOT / "_config.yml")
    parser.add_argument("--toc", type=Path, default=ROOT / "_toc.yml")
    parser.add_argument("--cache", type=Path, default=ROOT / "_build" / ".jupyter_cache")
    parser.add_argument("--jobs", type=int, default=0, help="kernels at once (0: CPU count)")
    parser.add_argument(
        "--guards",
        type=Path,
        default=None,
        help="folder of the per-page guard records (default: guards/ beside the cache)",
    )
    parser.add_argument(
        "--margins",
        type=Path,
        default=None,
        help="the merged guard-margin report (default: guard-margins.json beside the cache)",
    )
    parser.add_argument("--config-name", default="default", help="named in the margin report")
    parser.add_argument(
        "--timeout", type=int, default=None, help="seconds per cell (default: _config.yml's)"
    )
    args = parser.parse_args(argv)
    if args.jobs < 0:
        parser.error(f"--jobs must be >= 0, got {args.jobs}")
    timeout = args.timeout or int(yaml.safe_load(args.config.read_text())["execute"]["timeout"])
    pages = toc_notebooks(args.toc)
    if not pages:
        print("execute_pages: no notebook page in the toc")
        return 0
    # Absolute: each kernel runs in its page's own folder.
    guard_dir = (args.guards or args.cache.parent / "guards").resolve()
    margins = args.margins or args.cache.parent / "guard-margins.json"
    guard_dir.mkdir(parents=True, exist_ok=True)
    names = [p.stem for p in pages]
    # Longest pages first (last run's times, else the typical ones, else file size), so
    # the longest run does not start last.
    times_file = args.cache.parent / "execution-seconds.json"
    known = load_times(times_file)
    pages = page_order(pages, known)
    cache = get_cache(str(args.cache))
    cached = [p for p in pages if _is_cached(cache, p)]
    for page in cached:
        print(f"cached {page.relative_to(args.toc.parent)}")
    pages = [p for p in pages if p not in cached]
    if not pages:
        _report(guard_dir, names, margins, args.config_name)
        return 0
    jobs, _ = plan(args.jobs, len(pages))
    os.environ.setdefault("OMP_NUM_THREADS", KERNEL_THREADS)
    started = time.monotonic()
    print(
        f"execute_pages: {len(pages)} pages, {jobs} at once, "
        f"{os.environ['OMP_NUM_THREADS']} thread(s) each"
    )
    failed = []
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [
            pool.submit(_execute, str(p), timeout, str(guard_dir / f"{p.stem}.jsonl"))
            for p in pages
        ]
        for future in futures:
            path, nb, seconds, error = future.result()
            name = Path(path).relative_to(args.toc.parent)
            if error is not None:
                failed.append(str(name))
                print(f"FAIL {name} ({seconds:.0f} s)\n{error}", file=sys.stderr)
                continue
            record = cache.add_nb_to_project(path, read_data=MYST_READER)
            cache.cache_notebook_bundle(
                CacheBundleIn(nb, record.uri, data={"execution_seconds": seconds}),
                check_validity=False,
                overwrite=True,
            )
            known[Path(path).stem] = round(seconds, 1)
            print(f"ok   {name}: {seconds:.0f} s")
    total = time.monotonic() - started
    times_file.parent.mkdir(parents=True, exist_ok=True)
    times_file.write_text(json.dumps(known, indent=1, sort_keys=True) + "\n")
    print(f"execute_pages: {len(pages) - len(failed)} of {len(pages)} pages in {total:.0f} s")
    _report(guard_dir, names, margins, args.config_name)
    return 1 if failed else 0


def _report(guard_dir: Path, names: list[str], out: Path, config_name: str) -> None:
    """Merge the pages' guard records into ``out`` and print the thinnest margins."""
    report = guard_margins.merge(guard_dir, names, guard_margins.configuration(config_name))
    guard_margins.write(report, out)
    print("\n".join(guard_margins.summary_lines(report)))
    print(f"execute_pages: guard margins in {out}")


if __name__ == "__main__":
    sys.exit(main())
