"""Experiments, plots and GPU probes of the TF32 chapter."""
