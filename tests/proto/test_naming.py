"""Every wire struct follows the naming rule and is decodable on at least one stream or key."""

import inspect

from spex.proto import messages
from spex.proto.messages import Message
from spex.proto.names import KEYS, STREAMS

ROLES = ("Request", "Result", "Event")


def _message_types():
    return [
        obj
        for _, obj in inspect.getmembers(messages, inspect.isclass)
        if issubclass(obj, Message) and obj is not Message
    ]


def test_every_message_name_ends_in_its_role():
    bad = [t.__name__ for t in _message_types() if not t.__name__.endswith(ROLES)]
    assert not bad, f"message types must end in {ROLES}: {bad}"


def test_every_message_is_carried_by_some_stream_or_key():
    carried = {t for table in (STREAMS, KEYS) for types in table.values() for t in types}
    missing = [t.__name__ for t in _message_types() if t not in carried]
    assert not missing, f"not in any stream's or key's decoder: {missing}"


def test_every_message_is_exported():
    assert {t.__name__ for t in _message_types()} <= set(messages.__all__)
