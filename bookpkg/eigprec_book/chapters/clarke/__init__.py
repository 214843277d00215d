"""Experiments, timing sweeps, the regression model and plots of the Clarke chapter."""
