"""Experiments, error model, knob checks, audits, plots and GPU probes of the TF32 chapter."""
