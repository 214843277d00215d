"""Each chapter's experiments and plots: ``eigprec.chapters.<chapter>``."""
