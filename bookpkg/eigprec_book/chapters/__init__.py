"""Each chapter's experiments and plots: ``eigprec_book.chapters.<chapter>``."""
