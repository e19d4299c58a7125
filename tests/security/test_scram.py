"""
SCRAM-SHA-256 exchanges (meshroute.security.scram): RFC 7677's example,
mutual authentication, unknown users indistinguishable from wrong
passwords, and parsers that fail with one error type.
"""

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshroute.security.credentials import derive
from meshroute.security.scram import (
    ScramClient,
    ScramError,
    ScramServer,
    decoy_credentials,
)

SECRET = b"router secret"

# RFC 7677, section 3.
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")


def rfc_users(name):
    return {"user": derive("pencil", salt=RFC_SALT, iterations=4096)}.get(name)


def test_rfc7677_client():
    client = ScramClient("user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == RFC_CLIENT_FIRST
    assert client.final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.verify(RFC_SERVER_FINAL)


def test_rfc7677_server():
    server = ScramServer(rfc_users, SECRET, nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    assert server.first(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert server.user == "user"
    assert server.final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL


def exchange(users, user, password):
    client = ScramClient(user, password)
    server = ScramServer(users.get, SECRET)
    server_first = server.first(client.first())
    client_final = client.final(server_first)
    return client, server, server_first, client_final


def test_round_trip_with_a_name_to_escape():
    users = {"a=b,c": derive("s3cret", iterations=4096)}
    client, server, _, client_final = exchange(users, "a=b,c", "s3cret")
    client.verify(server.final(client_final))
    assert server.user == "a=b,c"


def test_wrong_password_is_refused():
    users = {"alice": derive("right", iterations=4096)}
    _, server, _, client_final = exchange(users, "alice", "wrong")
    with pytest.raises(ScramError) as wrong:
        server.final(client_final)
    assert str(wrong.value) == "the user is unknown or the proof is wrong"


def test_unknown_user_looks_like_a_known_one_and_fails_the_same_way():
    users = {"alice": derive("right", iterations=4096)}
    _, server, server_first, client_final = exchange(users, "mallory", "right")
    with pytest.raises(ScramError) as unknown:
        server.final(client_final)
    assert str(unknown.value) == "the user is unknown or the proof is wrong"
    # Same shape (nonce, 16-byte salt, the default iteration count) ...
    known_first = exchange(users, "alice", "x")[2]
    assert [part[:2] for part in server_first.split(b",")] == [b"r=", b"s=", b"i="]
    assert len(server_first.split(b",")[1]) == len(known_first.split(b",")[1])
    assert server_first.split(b",")[2] == known_first.split(b",")[2]
    # ... and the same salt on every attempt for the same name.
    again = exchange(users, "mallory", "other")[2]
    assert server_first.split(b",")[1] == again.split(b",")[1]
    assert decoy_credentials(SECRET, "mallory").salt != decoy_credentials(SECRET, "eve").salt


def test_decoy_credentials_never_let_a_guess_in():
    """
    Even a client that knew the router's secret and computed the decoy's
    keys is refused: an unknown user fails whatever the proof.
    """
    decoy = decoy_credentials(SECRET, "ghost")
    server = ScramServer(lambda name: None, SECRET)
    client = ScramClient("ghost", "")
    server_first = server.first(client.first())
    client_final = client.final(server_first)
    assert decoy.salt.hex() and server.user == "ghost"
    with pytest.raises(ScramError):
        server.final(client_final)


def test_client_refuses_a_server_that_does_not_know_the_credentials():
    """
    Mutual authentication: a server-final signature made without the
    user's ServerKey (an impostor's) fails the client's check; the real
    one passes.
    """
    real = derive("pw", iterations=4096)
    client, server, _, client_final = exchange({"alice": real}, "alice", "pw")
    with pytest.raises(ScramError, match="signature is wrong"):
        client.verify(b"v=" + b"A" * 43 + b"=")
    client.verify(server.final(client_final))


def test_client_refuses_a_server_nonce_that_does_not_extend_its_own():
    client = ScramClient("alice", "pw", nonce="abc")
    with pytest.raises(ScramError, match="nonce"):
        client.final(b"r=xyz123,s=AAAA,i=4096")
    with pytest.raises(ScramError, match="iteration"):
        client.final(b"r=abcdef,s=AAAA,i=999999999")


def test_messages_out_of_order_are_refused():
    with pytest.raises(ScramError):
        ScramServer(lambda n: None, SECRET).final(b"c=biws,r=x,p=AAAA")
    with pytest.raises(ScramError):
        ScramClient("a", "b").verify(b"v=AAAA")


@given(st.binary(max_size=300))
def test_server_first_parser_raises_only_scram_errors(data):
    server = ScramServer({"user": derive("pencil", iterations=4096)}.get, SECRET)
    try:
        server.first(data)
    except ScramError:
        pass


@given(st.binary(max_size=300))
def test_server_final_parser_raises_only_scram_errors(data):
    server = ScramServer({"user": derive("pencil", iterations=4096)}.get, SECRET)
    server.first(RFC_CLIENT_FIRST)
    with pytest.raises(ScramError):
        server.final(data)


@given(st.binary(max_size=300), st.binary(max_size=100))
def test_client_parsers_raise_only_scram_errors(server_first, server_final):
    client = ScramClient("user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    try:
        client.final(server_first)
    except ScramError:
        pass
    with pytest.raises(ScramError):
        client.verify(server_final)


@given(st.text(max_size=40).filter(bool), st.text(max_size=40))
def test_any_name_and_password_round_trip(user, password):
    users = {user: derive(password, iterations=1)}
    client, server, _, client_final = exchange(users, user, password)
    client.verify(server.final(client_final))
    assert server.user == user
