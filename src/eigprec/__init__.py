"""Companion package of the Eigen-Precision book."""

__all__: list[str] = []
__version__ = "0.1.0"
