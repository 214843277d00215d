"""The k-th eigenvalue of batched symmetric matrices, with a chosen Clarke subgradient.

``core`` holds the idea in one file that needs only torch (the k-th eigenvalue on torch's
``eigh`` with its Clarke backward); ``kth`` the full entry point :func:`kth_eigvalsh`
(checked arguments, solvers chosen per shape); ``ops`` its custom ops and autograd;
``tolerance`` the default cluster tolerance; ``auto`` how ``backend="auto"`` chooses;
``lapack``, ``inverse_iteration`` and ``cupy`` the other solvers.
"""

from eigprec.eig.kth import kth_eigvalsh
from eigprec.eig.tolerance import default_cluster_tol

__all__ = ["default_cluster_tol", "kth_eigvalsh"]
