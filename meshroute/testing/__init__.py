"""
Tools for testing code that uses meshroute, shipped with it: the
in-memory mesh (L{meshroute.testing.memory_mesh}).  Nothing in the router
imports this package.
"""
