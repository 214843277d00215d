"""The Eigen-Precision book's own code, built on the :mod:`eigprec` library.

``eigprec_book.helpers``: what a page needs to talk to its reader (glued values, hidden guards,
source listings, tables, figure checks, the scale experiments run at, the provenance box);
``eigprec_book.chapters.<chapter>``: each chapter's experiments and plots;
``eigprec_book.record``: the command lines that record GPU (and long CPU) runs into
``book/data/``. Imports run one way: library ← helpers ← chapters ← record.
"""
