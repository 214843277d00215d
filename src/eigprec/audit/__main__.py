"""``python -m eigprec.audit``: see :mod:`eigprec.audit.cli`."""

from eigprec.audit.cli import main

raise SystemExit(main())
