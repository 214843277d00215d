#!/usr/bin/env bash
# Every reader's notebook executed inside Colab's runtime container image, as a reader's
# "Open in Colab" runs it: the notebook unchanged (the weekly job takes them from the
# `notebooks` branch the book workflow pushes; tools/reader_notebooks.py writes them), its
# install cell installing eigprec from the repository on GitHub, at the commit the pages
# were built from, with Colab's own torch, numpy and matplotlib preinstalled.
# Run by .github/workflows/weekly.yml (job `colab`); tools/colab_check.py is the offline
# imitation that `make test` runs.
#
# Usage (inside the image): tools/colab_container.sh OUT_DIR NOTEBOOK...
# Each notebook runs in an empty folder of its own (Colab's /content has no book/data);
# the executed copy goes to OUT_DIR. Exits non-zero on the first failing cell.
# COLAB_KERNEL names the kernel (default python3, Colab's; tests/ use a stand-in).
set -euo pipefail
kernel="${COLAB_KERNEL:-python3}"

if [ "$#" -lt 2 ]; then
  echo "usage: $0 OUT_DIR NOTEBOOK..." >&2
  exit 2
fi
out="$1"
shift
mkdir -p "$out"
for nb in "$@"; do
  if [ ! -f "$nb" ]; then
    echo "colab_container: no notebook $nb" >&2
    exit 2
  fi
done

# The interpreter of Colab's kernel, the one the setup cell installs into.
py="$(python3 -c 'import sys; from jupyter_client.kernelspec import KernelSpecManager as M; print(M().get_kernel_spec(sys.argv[1]).argv[0])' "$kernel")"
"$py" --version
"$py" -c 'import torch, numpy, matplotlib; print("torch", torch.__version__, "numpy", numpy.__version__, "matplotlib", matplotlib.__version__)'
# Without these the run would say nothing about Colab.
"$py" -c 'import google.colab' || { echo "colab_container: google.colab is missing: not Colab's image?" >&2; exit 1; }
python3 -c 'import nbclient, nbformat' || { echo "colab_container: nbclient is missing from the image" >&2; exit 1; }
# Only the setup cell may provide the package.
if "$py" -c 'import eigprec' 2>/dev/null; then
  echo "colab_container: eigprec is importable before any setup cell ran" >&2
  exit 1
fi

# Colab's kernel has google.colab imported when a notebook starts; the setup cell tests
# `"google.colab" in sys.modules`.
startup="$("$py" -c 'import IPython.paths as p; print(p.get_ipython_dir())')/profile_default/startup"
mkdir -p "$startup"
echo 'import google.colab  # as in a Colab kernel' > "$startup/00-colab.py"

for nb in "$@"; do
  name="$(basename "$nb" .ipynb)"
  work="$(mktemp -d "/tmp/content-$name.XXXX")"
  cp "$nb" "$work/"
  echo "::group::$name"
  start=$SECONDS
  # The executed copy is written even when a cell fails: it shows the traceback.
  python3 - "$work/$name.ipynb" "$out/$name.ipynb" "$kernel" <<'PY'
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

source, dest, kernel = sys.argv[1:]
nb = nbformat.read(source, as_version=4)
# Per cell, generous for a CPU runner (execute.timeout in _config.yml is 600).
client = NotebookClient(
    nb, timeout=1800, kernel_name=kernel, resources={"metadata": {"path": str(Path(source).parent)}}
)
try:
    client.execute()
finally:
    nbformat.write(nb, dest)
PY
  echo "::endgroup::"
  echo "$name: every cell ran in $((SECONDS - start)) s"
done

# The package came from the setup cell's install, not from anywhere else.
"$py" -c 'import eigprec; print("eigprec installed by the setup cell at", eigprec.__file__)'
