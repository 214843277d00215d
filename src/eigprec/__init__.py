"""Companion package of the Eigen-Precision book."""

from eigprec.eig import default_cluster_tol, kth_eigvalsh

__all__: list[str] = ["default_cluster_tol", "kth_eigvalsh"]
__version__ = "0.1.0"
