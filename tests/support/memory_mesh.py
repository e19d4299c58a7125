"""
The in-memory mesh, for tests: it lives in L{meshroute.memory_mesh}, where
the scale benchmark (C{benchmarks/mesh_scale.py}) uses it too; tests keep
importing it from here.
"""

from meshroute.memory_mesh import *  # noqa: F401,F403
from meshroute.memory_mesh import __all__  # noqa: F401
from meshroute.memory_mesh import _Connection, _Transport  # noqa: F401
