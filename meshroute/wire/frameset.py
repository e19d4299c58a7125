"""
Frames as typed dataclasses, and the schema check that guards decoding.

A protocol declares its frames as frozen dataclasses with a C{TYPE} code
and gathers them in a L{FrameSet}.  On the wire a frame body is a msgpack
array: the type code, then the fields in declaration order.  The field
annotations are the wire schema, checked on decode, so a frame object that
exists is always well-typed: a peer cannot smuggle a bool where an int is
due, or a number where bytes are due.
"""

from dataclasses import fields

from meshroute.errors import WireError

#: The Python type a msgpack decode must yield for each annotation.  bool
#: is a subclass of int and must not pass as one, hence exact type checks.
_WIRE_TYPES = {int: int, str: str, bytes: bytes, list: list, dict: dict, bool: bool, float: float}


_field_names: dict[type, tuple[str, ...]] = {}


def frame_to_list(frame) -> list:
    """
    The msgpack array for C{frame}: its type code, then its fields.
    """
    cls = type(frame)
    names = _field_names.get(cls)
    if names is None:
        names = _field_names[cls] = tuple(f.name for f in fields(cls))
    return [frame.TYPE, *(getattr(frame, name) for name in names)]


class FrameSet:
    """
    The frames one protocol may carry, by type code.
    """

    def __init__(self, name: str, classes) -> None:
        self.name = name
        self.types: dict[int, type] = {}
        self._specs: dict[type, tuple] = {}
        for cls in classes:
            if cls.TYPE in self.types:
                raise ValueError(f"{name}: type code {cls.TYPE} used twice")
            self.types[cls.TYPE] = cls
            self._specs[cls] = tuple((f.name, _WIRE_TYPES[f.type]) for f in fields(cls))

    def from_list(self, items):
        """
        Rebuild a frame from a decoded msgpack array, checking every field.

        @raise WireError: not an array, unknown type code, wrong number of
            fields, or a field of the wrong type.
        """
        if type(items) is not list or not items:
            raise WireError("frame body is not a non-empty array")
        code = items[0]
        cls = self.types.get(code) if type(code) is int else None
        if cls is None:
            raise WireError(f"unknown {self.name} frame type {code!r}")
        spec = self._specs[cls]
        if len(items) - 1 != len(spec):
            raise WireError(
                f"{cls.__name__} frame has {len(items) - 1} fields, expected {len(spec)}"
            )
        for (name, expected), value in zip(spec, items[1:]):
            if type(value) is not expected:
                raise WireError(
                    f"{cls.__name__}.{name} is {type(value).__name__}, "
                    f"expected {expected.__name__}"
                )
            if expected is dict and not all(
                type(k) is str and type(v) is str for k, v in value.items()
            ):
                raise WireError(f"{cls.__name__}.{name} must map strings to strings")
        return cls(*items[1:])
