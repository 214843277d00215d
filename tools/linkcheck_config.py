"""The book's _config.yml for `make linkcheck`: chapters not executed, nothing else changed.

Unexecuted chapters have no glued values, so MyST-NB's warnings about them are
silenced. jupyter-book resolves `sphinx.local_extensions` paths against the folder of
the configuration file it is given, so the copy written elsewhere names them absolutely.

Usage: ``python tools/linkcheck_config.py _config.yml OUT.yml``
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml


def linkcheck_config(config: dict, root: Path) -> dict:
    """``config`` with execution off and local extension paths made absolute."""
    derived = yaml.safe_load(yaml.safe_dump(config))  # a deep copy
    derived.setdefault("execute", {})["execute_notebooks"] = "off"
    sphinx_config = derived.setdefault("sphinx", {}).setdefault("config", {})
    sphinx_config["suppress_warnings"] = [
        *sphinx_config.get("suppress_warnings", []),
        "mystnb.glue",
    ]
    local = derived.get("sphinx", {}).get("local_extensions") or {}
    for name, path in local.items():
        local[name] = str((root / path).resolve())
    return derived


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    source, dest = Path(args[0]), Path(args[1])
    config = yaml.safe_load(source.read_text())
    dest.parent.mkdir(parents=True, exist_ok=True)
    derived = linkcheck_config(config, source.resolve().parent)
    dest.write_text(yaml.safe_dump(derived, sort_keys=False, allow_unicode=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
