"""
Records as the event log writes them: compact JSON, one object per line,
the fields C{time}, C{router} and C{event} first; a batch of records of
one event is encoded at once, byte for byte as one at a time would be.
"""

import json
from itertools import chain, repeat
from json.encoder import c_make_encoder, encode_basestring_ascii
from math import isfinite


#: The compact encoder every record is byte-compatible with (what
#: L{encode_records} falls back to for values it does not encode itself):
#: C{json.JSONEncoder(separators=(",", ":")).encode}, whose C encoder is
#: made once here rather than for every record (a third of a record's
#: cost).  Records are made by this code, so the check for circular
#: references that costs is left out.
_C_ENCODER = c_make_encoder(None, json.JSONEncoder().default, encode_basestring_ascii, None,
                            ":", ",", False, False, True)


def encode_record(o) -> str:
    """
    C{o} (a record, or any value of one) as compact JSON.
    """
    return "".join(_C_ENCODER(o, 0))


_STRING = encode_basestring_ascii
_SCALARS = {
    str: _STRING,
    int: int.__repr__,
    bool: {True: "true", False: "false"}.__getitem__,
    type(None): lambda v: "null",
}
#: The fields every record starts with; a record naming one of them again
#: is encoded as a dict, where the later value takes the first one's place.
_HEAD = ("time", "router", "event")


def _value(v) -> str:
    """
    C{v} as L{encode_record} writes it, without building an encoder per record.
    """
    scalar = _SCALARS.get(type(v))
    if scalar is not None:
        return scalar(v)
    if type(v) is float and v - v == 0:  # finite: JSON's float is float's repr
        return float.__repr__(v)
    return encode_record(v)


def _keys(names: tuple) -> list[str] | None:
    """
    The JSON keys of a record's fields C{names} after the head (None if
    one of them repeats a head field or another: such a record is written
    as a dict, where the later value takes the first one's place).
    """
    if set(names) & set(_HEAD) or len(set(names)) != len(names):
        return None
    return [_STRING(name) for name in names]


def _column(values: tuple) -> tuple[str | None, list | None]:
    """
    One field of a batch of records: C{(text, None)} when every record
    has the same value of a scalar type (C{text} as L{_value} writes it),
    else C{(None, texts)}, one per record as L{_value} writes it.  A
    column of one scalar type is written by one C-level map over its
    encoder, not by a Python call per value.
    """
    first = values[0]
    kind = type(first)
    if kind is str:
        # Equal to a string, a value is one (or one written the same).
        if values.count(first) == len(values):
            return _STRING(first), None
        try:
            return None, list(map(_STRING, values))
        except TypeError:  # not all strings
            return None, list(map(_value, values))
    if len(set(map(type, values))) != 1:
        # Mixed, and maybe equal across types (1 and True).
        return None, list(map(_value, values))
    scalar = _SCALARS.get(kind)
    if scalar is not None:
        if values.count(first) == len(values):
            return scalar(first), None
        return None, list(map(scalar, values))
    if kind is float and all(map(isfinite, values)):
        # Few distinct times (a batch's messages share theirs): each
        # written once.  Not with a zero, which -0.0 would equal.
        distinct = set(values)
        if len(distinct) * 4 <= len(values) and 0.0 not in distinct:
            texts = dict(zip(distinct, map(float.__repr__, distinct)))
            if len(texts) == 1:
                return texts.popitem()[1], None
            return None, list(map(texts.__getitem__, values))
        return None, list(map(float.__repr__, values))
    return None, list(map(_value, values))


def encode_records(time: float, router: str, event: str, names: tuple, rows) -> str:
    """
    The records of C{event} at C{time} with fields C{names} and a tuple of
    values per record in C{rows}, one per line (no line end after the
    last), each exactly as L{encode_record} would write the dict C{{time,
    router, event, **fields}}.  A record's text between the fields that
    differ from record to record (the head, keys, and the values every
    record shares) is made once; the records are joined from it and the
    columns of values (L{_column}) in one C-level pass.
    """
    keys = _keys(names)
    if keys is None:
        head = {"time": time, "router": router, "event": event}
        return "\n".join([encode_record({**head, **dict(zip(names, row))}) for row in rows])
    if not rows:
        return ""
    # Text, then a column, then text, ..., then text: a record.
    texts: list[str] = []
    columns: list[list[str]] = []
    text = f'{{"time":{_value(time)},"router":{_value(router)},"event":{_value(event)}'
    for key, values in zip(keys, zip(*rows)):
        text += f",{key}:"
        shared, column = _column(values)
        if column is None:
            text += shared
        else:
            texts.append(text)
            columns.append(column)
            text = ""
    texts.append(text + "}")
    if not columns:
        return "\n".join([texts[0]] * len(rows))
    # Each record after the first starts on a new line.
    parts = [chain((texts[0],), repeat("\n" + texts[0]))]
    for column, text in zip(columns, texts[1:]):
        parts += [column, repeat(text)]
    return "".join(chain.from_iterable(zip(*parts)))
