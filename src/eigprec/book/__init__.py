"""The book's helpers: what a chapter needs to talk to its reader.

Hidden guards and their margins (``eigprec.book.guards``), glued values and progress
bars (``eigprec.book.notebook``), package code shown in a page (``eigprec.book.source``),
tables, notes and printed bounds (``eigprec.book.display``),
figure size and text checks (``eigprec.book.figures``), and how large the experiments
run (``eigprec.book.scale``).
The library (:mod:`eigprec`) never imports this package.
"""

from eigprec.book.display import markdown_table, note, printed_bound
from eigprec.book.figures import MAX_WIDTH_IN, MIN_FONT_PT, check_readable, use_book_style
from eigprec.book.guards import GuardRecord, between, check, guard, guard_records
from eigprec.book.notebook import glue, load_record, progress, record_dirs
from eigprec.book.scale import full_scale, quick_scale
from eigprec.book.source import SourceListing, show_source

__all__ = [
    "MAX_WIDTH_IN",
    "MIN_FONT_PT",
    "GuardRecord",
    "SourceListing",
    "between",
    "check",
    "check_readable",
    "full_scale",
    "glue",
    "guard",
    "guard_records",
    "load_record",
    "markdown_table",
    "note",
    "printed_bound",
    "progress",
    "quick_scale",
    "record_dirs",
    "show_source",
    "use_book_style",
]
