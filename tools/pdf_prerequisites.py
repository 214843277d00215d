"""What `make pdf` needs beyond .venv, and how to install it (issue 51).

The PDF edition goes through Sphinx's LaTeX builder and xelatex (book/_ext/eigprec_latex.py).
That needs TeX Live with xelatex, latexmk and xindy, ``rsvg-convert`` for the SVG figures
and the DejaVu fonts, none of which pip installs. Each is looked for as the build uses it:
a command on ``PATH``, a LaTeX file through ``kpsewhich``, a font through ``fc-list``. What is
missing is named with its Debian package, and the exit status is 1, before anything is
built: `make pdf` never skips the PDF silently.

``--install`` installs every package of :data:`PACKAGES` with apt-get (as root, or with
passwordless sudo), as the weekly and publishing workflows do, then checks again.

Usage: ``python tools/pdf_prerequisites.py [--install]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["NEEDS", "PACKAGES", "Need", "install_command", "main", "missing"]


@dataclass(frozen=True)
class Need:
    """One thing the PDF build uses, how it is found, and the Debian package that has it.

    Attributes:
        name: a command, a LaTeX file or a font family.
        kind: ``"command"``, ``"tex"`` (found by ``kpsewhich``) or ``"font"`` (by ``fc-list``).
        package: the Debian package that provides it.
    """

    name: str
    kind: str
    package: str


#: Everything `make pdf` uses beyond .venv, one representative file per TeX package.
NEEDS = (
    Need("xelatex", "command", "texlive-xetex"),
    Need("latexmk", "command", "latexmk"),
    Need("xindy", "command", "xindy"),
    Need("rsvg-convert", "command", "librsvg2-bin"),
    Need("unicode-math.sty", "tex", "texlive-latex-recommended"),
    Need("fncychap.sty", "tex", "texlive-latex-extra"),
    Need("ucharclasses.sty", "tex", "texlive-xetex"),
    Need("pzdr.tfm", "tex", "texlive-fonts-recommended"),
    Need("latinmodern-math.otf", "tex", "fonts-lmodern"),
    Need("DejaVu Serif", "font", "fonts-dejavu-core"),
    Need("DejaVu Sans", "font", "fonts-dejavu-core"),
    Need("DejaVu Sans Mono", "font", "fonts-dejavu-core"),
)
#: The Debian packages to install, in the order named above.
PACKAGES = tuple(dict.fromkeys(need.package for need in NEEDS))


def _answers(command: list[str]) -> bool:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and bool(done.stdout.strip())


def _present(need: Need) -> bool:
    if need.kind == "command":
        return shutil.which(need.name) is not None
    if need.kind == "tex":
        tool = shutil.which("kpsewhich")
        return tool is not None and _answers([tool, need.name])
    if need.kind == "font":
        tool = shutil.which("fc-list")
        return tool is not None and _answers([tool, need.name, "family"])
    raise ValueError(f"unknown kind of need {need.kind!r} for {need.name}")


def missing(needs: Sequence[Need] = NEEDS) -> list[Need]:
    """The needs that this machine lacks.

    Args:
        needs: what to look for.

    Returns:
        Those not found, in order.

    Raises:
        ValueError: a need of unknown kind.

    Example:
        >>> missing([Need("sh", "command", "dash")])
        []
    """
    return [need for need in needs if not _present(need)]


def install_command(packages: Sequence[str] = PACKAGES) -> list[str]:
    """The apt-get command that installs ``packages`` without questions.

    Args:
        packages: Debian package names.

    Returns:
        The command's words (to run as root).

    Example:
        >>> install_command(["latexmk"])
        ['apt-get', 'install', '-y', '--no-install-recommends', 'latexmk']
    """
    return ["apt-get", "install", "-y", "--no-install-recommends", *packages]


def _report(lacking: list[Need]) -> str:
    lines = ["make pdf: this machine lacks what the PDF build needs:"]
    lines += [f"  {need.name} ({need.kind}; Debian package {need.package})" for need in lacking]
    packages = " ".join(dict.fromkeys(need.package for need in lacking))
    lines += [
        "Install them on Debian or Ubuntu with",
        f"  sudo apt-get update && sudo {' '.join(install_command([]))} {packages}",
        "or run `make pdf-prerequisites`, which does that (as root or with sudo).",
    ]
    return "\n".join(lines)


def _install() -> int:
    prefix: list[str] = []
    if os.geteuid() != 0:
        sudo = shutil.which("sudo")
        if sudo is None or subprocess.run([sudo, "-n", "true"], check=False).returncode != 0:
            print("make pdf-prerequisites: needs root or passwordless sudo", file=sys.stderr)
            return 1
        prefix = [sudo, "-n"]
    if shutil.which("apt-get") is None:
        print("make pdf-prerequisites: no apt-get here; install the packages of", file=sys.stderr)
        print("  tools/pdf_prerequisites.py with this system's package manager", file=sys.stderr)
        return 1
    for command in (["apt-get", "update", "-qq"], [*install_command(), "-qq"]):
        # env: sudo may not pass the caller's environment on.
        done = subprocess.run([*prefix, "env", "DEBIAN_FRONTEND=noninteractive", *command])
        if done.returncode != 0:
            return done.returncode
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--install", action="store_true", help="install the Debian packages with apt-get first"
    )
    args = parser.parse_args(argv)
    if args.install:
        status = _install()
        if status != 0:
            return status
    lacking = missing()
    if lacking:
        print(_report(lacking), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
