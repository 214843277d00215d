"""The book's helpers: what a chapter needs to talk to its reader.

Hidden guards and their margins (``guards``), glued values and progress bars
(``notebook``), package code shown in a page (``source``), tables, notes and printed bounds
(``display``), figure size and text checks (``figures``), how large the experiments run,
with the provenance box that says so (``scale``), and every seed a page uses (``seeds``).
"""

from eigprec_book.helpers.display import markdown_table, note, printed_bound
from eigprec_book.helpers.figures import MAX_WIDTH_IN, MIN_FONT_PT, check_readable, use_book_style
from eigprec_book.helpers.guards import (
    GuardRecord,
    between,
    check,
    claim,
    guard,
    guard_records,
    live_and_recorded,
)
from eigprec_book.helpers.notebook import (
    glue,
    load_record,
    progress,
    record_dirs,
    record_source,
)
from eigprec_book.helpers.scale import full_scale, provenance, quick_scale, scale
from eigprec_book.helpers.seeds import seed, seed_offset, seed_set, seeds
from eigprec_book.helpers.source import SourceListing, show_source

__all__ = [
    "MAX_WIDTH_IN",
    "MIN_FONT_PT",
    "GuardRecord",
    "SourceListing",
    "between",
    "check",
    "check_readable",
    "claim",
    "full_scale",
    "glue",
    "guard",
    "guard_records",
    "live_and_recorded",
    "load_record",
    "markdown_table",
    "note",
    "printed_bound",
    "progress",
    "provenance",
    "quick_scale",
    "record_dirs",
    "record_source",
    "scale",
    "seed",
    "seed_offset",
    "seed_set",
    "seeds",
    "show_source",
    "use_book_style",
]
