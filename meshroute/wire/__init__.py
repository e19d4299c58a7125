"""
The routing-link wire format: length-prefixed msgpack frames.

L{frames} defines every frame and its fields; L{codec} turns frames into
bytes and bytes into frames, with explicit size limits and a single error
type (L{meshroute.errors.WireError}).  Nothing here does I/O.
"""
