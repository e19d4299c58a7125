"""
Throwaway X.509 material for TLS tests: a CA, a server certificate for
127.0.0.1 and localhost, and client certificates whose subject CN names a
user, each written as PEM files.
"""

import datetime
import ipaddress

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _write_pem(path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _validity(builder: x509.CertificateBuilder) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (builder.serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1)))


def make_ca(directory, common_name):
    """
    A throwaway CA: its key, and its certificate written as
    C{directory/ca.pem} (a trustRoots directory holding just this CA).
    """
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        _validity(x509.CertificateBuilder())
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_pem(directory / "ca.pem", cert.public_bytes(serialization.Encoding.PEM))
    return key, cert


def _leaf(directory, name: str, ca_key, ca_cert, common_name: str, usage, extensions=()):
    """
    A certificate for C{common_name} signed by the CA, written as
    C{directory/NAME.key} and C{directory/NAME.pem}; returns both paths.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        _validity(x509.CertificateBuilder())
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    for extension in extensions:
        builder = builder.add_extension(extension, critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    key_path = directory / f"{name}.key"
    cert_path = directory / f"{name}.pem"
    _write_pem(
        key_path,
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
    _write_pem(cert_path, cert.public_bytes(serialization.Encoding.PEM))
    return key_path, cert_path


def make_server_cert(directory, ca_key, ca_cert):
    """
    A server certificate for 127.0.0.1 and localhost signed by the CA;
    returns the paths of its key and certificate.
    """
    names = x509.SubjectAlternativeName(
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    return _leaf(directory, "server", ca_key, ca_cert, "localhost",
                 ExtendedKeyUsageOID.SERVER_AUTH, (names,))


def make_client_cert(directory, ca_key, ca_cert, common_name: str):
    """
    A client certificate whose subject CN is C{common_name}, signed by the
    CA; returns the paths of its key and certificate.
    """
    return _leaf(directory, common_name, ca_key, ca_cert, common_name,
                 ExtendedKeyUsageOID.CLIENT_AUTH)
