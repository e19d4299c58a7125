"""
Frames as typed dataclasses, and the schema check that guards decoding.

A protocol declares its frames as frozen dataclasses with a C{TYPE} code
and gathers them in a L{FrameSet}.  On the wire a frame body is a msgpack
array: the type code, then the fields in declaration order.  The field
annotations are the wire schema, checked on decode, so a frame object that
exists is always well-typed: a peer cannot smuggle a bool where an int is
due, or a number where bytes are due.

A frame may declare C{OPTIONAL_TAIL = n}: its last C{n} fields (each
with a default) may be left off the wire.  The encoder leaves off those
at the end that hold their default, and the decoder fills them in.  So
a field added to a frame that must stay readable by older peers (the
link's L{meshroute.wire.frames.Hello} before a version is agreed) costs
nothing on the wire while it holds its default, and an older peer that
never sends it is understood.

A later protocol version may extend a frame with more fields: the longer
frame is a class of its own with the same type code (usually a subclass),
and the field count tells the shapes apart on decoding.  Which shape a
peer must send is the protocol's rule (the version it negotiated), not the
codec's.
"""

from dataclasses import MISSING, fields

from meshroute.errors import WireError

#: The Python type a msgpack decode must yield for each annotation.  bool
#: is a subclass of int and must not pass as one, hence exact type checks.
_WIRE_TYPES = {int: int, str: str, bytes: bytes, list: list, dict: dict, bool: bool, float: float}


_field_names: dict[type, tuple[str, ...]] = {}
_optional_defaults: dict[type, tuple] = {}


def frame_to_list(frame) -> list:
    """
    The msgpack array for C{frame}: its type code, then its fields, less
    the optional ones at the end that hold their default.
    """
    cls = type(frame)
    names = _field_names.get(cls)
    if names is None:
        names = _field_names[cls] = tuple(f.name for f in fields(cls))
        tail = getattr(cls, "OPTIONAL_TAIL", 0)
        _optional_defaults[cls] = tuple(
            f.default for f in fields(cls)[len(names) - tail:]) if tail else ()
    items = [frame.TYPE, *(getattr(frame, name) for name in names)]
    for default in reversed(_optional_defaults[cls]):
        if items[-1] != default or type(items[-1]) is not type(default):
            break
        items.pop()
    return items


class FrameSet:
    """
    The frames one protocol may carry, by type code and field count.

    @ivar types: each type code's first class given (its original shape).
    @ivar classes: every class, in the order given.
    """

    def __init__(self, name: str, classes) -> None:
        self.name = name
        self.classes = tuple(classes)
        self.types: dict[int, type] = {}
        self._shapes: dict[tuple[int, int], type] = {}
        self._specs: dict[type, tuple] = {}
        for cls in self.classes:
            spec = tuple((f.name, _WIRE_TYPES[f.type]) for f in fields(cls))
            tail = getattr(cls, "OPTIONAL_TAIL", 0)
            if any(f.default is MISSING for f in fields(cls)[len(spec) - tail:]):
                raise ValueError(f"{name}: {cls.__name__}'s optional fields need defaults")
            for count in range(len(spec) - tail, len(spec) + 1):
                if (cls.TYPE, count) in self._shapes:
                    raise ValueError(f"{name}: type code {cls.TYPE} with {count} fields "
                                     "used twice")
                self._shapes[cls.TYPE, count] = cls
            self._specs[cls] = spec
            self.types.setdefault(cls.TYPE, cls)

    def from_list(self, items):
        """
        Rebuild a frame from a decoded msgpack array, checking every field.

        @raise WireError: not an array, unknown type code, wrong number of
            fields (optional ones at the end may be missing), or a field of
            the wrong type.
        """
        if type(items) is not list or not items:
            raise WireError("frame body is not a non-empty array")
        code = items[0]
        first = self.types.get(code) if type(code) is int else None
        if first is None:
            raise WireError(f"unknown {self.name} frame type {code!r}")
        cls = self._shapes.get((code, len(items) - 1))
        if cls is None:
            counts = sorted(n for c, n in self._shapes if c == code)
            expected = " or ".join(str(n) for n in counts)
            raise WireError(
                f"{first.__name__} frame has {len(items) - 1} fields, expected {expected}"
            )
        for (name, expected), value in zip(self._specs[cls], items[1:]):
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
