"""The library's hard dependencies are what the library imports (issue 23.12): `import
eigprec` and its public functions work where the book's packages (Matplotlib, Pygments,
tqdm, scikit-learn, threadpoolctl, Jupyter) are missing; those come with the `book` extra.
"""

import re
import subprocess
import sys
import tomllib

from .conftest import ROOT

BOOK_ONLY = ["matplotlib", "pygments", "tqdm", "sklearn", "threadpoolctl", "IPython", "myst_nb"]

# Run in a fresh interpreter whose import system finds none of the book's packages, as an
# environment without them would: every finder answers "not found" for them (so torch's
# probes for optional modules see them missing too), and an import raises
# ModuleNotFoundError.
SCRIPT = """
import importlib.abc, sys

BLOCKED = {blocked!r}

class Hide(importlib.abc.MetaPathFinder):
    def __init__(self, inner):
        self.inner = inner

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            return None
        return self.inner.find_spec(name, path, target)

    def invalidate_caches(self):
        getattr(self.inner, "invalidate_caches", lambda: None)()

sys.meta_path[:] = [Hide(f) for f in sys.meta_path]
for name in BLOCKED:
    try:
        __import__(name)
    except ImportError:
        pass
    else:
        raise SystemExit(f"the block failed: {{name}} imported")

import torch
import eigprec

g = torch.Generator().manual_seed(0)
a = torch.randn(6, 6, generator=g)
x = torch.randn(3, 5, 5, generator=g)
x = (x + x.mT) / 2

big, small = eigprec.split_tf32(a)
assert torch.equal(eigprec.round_tf32(a), big)
assert eigprec.matmul_3xtf32(a, a).shape == (6, 6)
with eigprec.emulate_tf32():
    with eigprec.matmul_precision("high"):
        assert eigprec.current_matmul_precision() == "high"
        a @ a
with eigprec.tf32_audit() as report:
    a @ a
report.to_markdown(); str(report.to_text())
eigprec.tf32_attribution(lambda: a @ a)
x.requires_grad_(True)
lam = eigprec.kth_eigvalsh(x, 2, subgradient="mean")
lam.sum().backward()
assert x.grad.shape == x.shape
eigprec.default_cluster_tol(torch.linalg.eigvalsh(x.detach()), 5)
q = torch.linalg.eigh(x.detach())[1]
eigprec.principal_angles(q[0, :, :2], q[1, :, :2])
eigprec.subspace_angle(q[0], q[1], 2)
eigprec.top1_angle(q[0], q[1])
w = torch.linalg.eigvalsh(x.detach())
eigprec.eigenvalue_clusters(w[0], 1e-3)
eigprec.cluster_angles(q[0], q[1], w[0], 1e-3)
eigprec.davis_kahan_bound(1e-3, 1.0)
eigprec.ema_first_weight(0.9, 10)
for cls in (eigprec.SOAP, eigprec.REKLS):
    p = torch.nn.Parameter(torch.randn(4, 3, generator=g))
    opt = cls([p], lr=1e-3)
    p.grad = torch.randn(4, 3, generator=g)
    opt.step()
info = eigprec.describe_runtime()
str(info); info._repr_html_(); info.as_record()
eigprec.tf32_mode("cpu", "high", torch.float32)
eigprec.tf32_matmul_enabled()
eigprec.has_real_tf32("cpu")
eigprec.time_side_by_side({{"a": lambda: a @ a}}, repeats=2)
leaked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
assert not leaked, leaked
assert "eigprec_book.helpers" not in sys.modules
print("ok")
"""


def test_the_library_works_without_the_books_packages():
    script = SCRIPT.format(blocked=BOOK_ONLY)
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


def test_the_blocked_modules_are_the_book_packages_and_not_the_librarys():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    hard = {re.split(r"[<>=\[; ]", d)[0].lower() for d in project["dependencies"]}
    book_project = tomllib.loads((ROOT / "bookpkg" / "pyproject.toml").read_text())["project"]
    book = {re.split(r"[<>=\[; ]", d)[0].lower() for d in book_project["dependencies"]}
    assert hard == {"torch", "numpy", "scipy"}
    assert {"matplotlib", "pygments", "tqdm", "scikit-learn", "threadpoolctl"} <= book
