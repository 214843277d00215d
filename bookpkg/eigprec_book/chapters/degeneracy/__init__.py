"""Experiments and plots of the eigenbasis-degeneracy chapter."""
