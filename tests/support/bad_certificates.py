"""Certificates and keys that granian must not be started with, each made by Debian's
openssl and signed by the session's test CA (:func:`support.proxies.certificates`):
``make(kind, directory)`` writes a pair and returns (certificate, key) paths. Used by
tests/unit/serving/test_tls_files.py and tests/integration/test_tls_live.py."""

import pathlib
import subprocess

from support.proxies import OPENSSL, certificates

EXTENSIONS = ("subjectAltName = IP:127.0.0.1, DNS:localhost\nbasicConstraints = CA:FALSE\n"
              "keyUsage = critical, digitalSignature\nextendedKeyUsage = serverAuth\n")
CA_CONFIG = """[ca]
default_ca = test
[test]
database = index.txt
new_certs_dir = .
serial = serial
default_md = sha256
policy = anything
unique_subject = no
[anything]
commonName = supplied
"""
# What each kind is refused for, as the one line says it (a part of it).
REFUSED = {
    "v1": ("tls_certificate", "X.509 version 1"),
    "expired": ("tls_certificate", "the certificate expired on 2020-01-02 00:00:00 UTC"),
    "not-yet-valid": ("tls_certificate", "valid only from 2099-01-01 00:00:00 UTC"),
    "dsa": ("tls_certificate", "the certificate's key is DSA"),
    "ed448": ("tls_certificate", "the certificate's key is Ed448"),
    "p521": ("tls_certificate", "the certificate's key is ECDSA on P-521"),
    "rsa2560": ("tls_certificate", "the certificate's key is RSA of 2560 bits"),
    "critical-extension": ("tls_certificate", "the extension 1.2.3.4.5 critical"),
    "encrypted-key": ("tls_key", "the private key is encrypted"),
    "key-without-public": ("tls_key", "leaves out its public key"),
    "explicit-curve": ("tls_key", "gives its curve's parameters explicitly"),
    "empty-certificate": ("tls_certificate", "no certificate in the file"),
    "key-as-certificate": ("tls_certificate", "no certificate in the file"),
    "empty-key": ("tls_key", "no private key in the file"),
    "chain-in-wrong-order": ("tls_certificate", "the key goes with certificate 2 of the file"),
}


def make(kind, directory):
    """Write the pair ``kind`` (one of :data:`REFUSED`, or ``good``, or ``expiring``,
    three days from its end) in ``directory``: (certificate, key), the key mode 0600."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    pki = certificates()

    def openssl(*args, **kwargs):
        return subprocess.run([OPENSSL, *args], cwd=directory, check=True,
                              capture_output=True, **kwargs).stdout

    (directory / "ca.cnf").write_text(CA_CONFIG)
    (directory / "index.txt").write_text("")
    (directory / "serial").write_text("01\n")
    (directory / "tls.ext").write_text(EXTENSIONS)
    cert, key = directory / "tls.crt", directory / "tls.key"
    newkey = {"dsa": ["dsa:dsa.params"], "ed448": ["ed448"], "rsa2560": ["rsa:2560"],
              "p521": ["ec", "-pkeyopt", "ec_paramgen_curve:secp521r1"]}.get(
        kind, ["ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"])
    if kind == "dsa":
        openssl("dsaparam", "-out", "dsa.params", "2048")
    openssl("req", "-newkey", *newkey, "-noenc", "-keyout", "tls.key", "-out", "tls.csr",
            "-subj", "/CN=127.0.0.1")
    dates = {"expired": ["-startdate", "20200101000000Z", "-enddate", "20200102000000Z"],
             "not-yet-valid": ["-startdate", "20990101000000Z", "-enddate",
                               "20990102000000Z"],
             "expiring": ["-days", "3"]}.get(kind, ["-days", "30"])
    if kind == "critical-extension":
        (directory / "tls.ext").write_text(EXTENSIONS + "1.2.3.4.5 = critical,ASN1:UTF8String:x\n")
    if kind == "v1":  # openssl x509 -req with no extensions writes version 1
        openssl("x509", "-req", "-in", "tls.csr", "-CA", str(pki.ca), "-CAkey",
                str(pki.dir / "ca.key"), "-days", "30", "-out", "tls.crt")
    else:
        openssl("ca", "-batch", "-config", "ca.cnf", "-cert", str(pki.ca), "-keyfile",
                str(pki.dir / "ca.key"), "-in", "tls.csr", "-out", "tls.crt", "-notext",
                "-extfile", "tls.ext", *dates)
    if kind == "encrypted-key":
        openssl("pkey", "-in", "tls.key", "-aes256", "-passout", "pass:secret", "-out",
                "new.key")
    elif kind == "key-without-public":
        openssl("ec", "-in", "tls.key", "-no_public", "-out", "new.key")
    elif kind == "explicit-curve":
        openssl("ec", "-in", "tls.key", "-param_enc", "explicit", "-out", "new.key")
    elif kind == "empty-certificate":
        cert.write_bytes(b"")
    elif kind == "key-as-certificate":
        cert.write_bytes(key.read_bytes())
    elif kind == "empty-key":
        key.write_bytes(b"")
    elif kind == "chain-in-wrong-order":
        cert.write_bytes(pki.ca.read_bytes() + cert.read_bytes())
    if (directory / "new.key").exists():
        (directory / "new.key").replace(key)
    key.chmod(0o600)
    return cert, key
