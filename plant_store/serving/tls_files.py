"""The certificate and key that granian serves HTTPS with (``tls_certificate``,
``tls_key``), checked at start, so that every problem is one line and exit status 2 and
never a worker's panic (granian builds its TLS configuration in each worker, after the
fork, and a file rustls refuses ends the worker with a Rust backtrace).

What granian 2.8.9 does with the files (rustls 0.23 with ring 0.17, and rustls-webpki
0.103, measured with openssl-made files): it reads every ``CERTIFICATE`` block of the
certificate file as the chain, and the first private key block of the key file; it parses
the first certificate (the server's own) as webpki does, and loads the key with ring. The
invariants checked here, each refused in one line naming the setting to fix:

- both files are readable regular files of at most MAX_SIZE bytes (a FIFO or a device
  would hang the start); the certificate file holds PEM ``CERTIFICATE`` blocks, each
  beginning a line (a byte-order mark hides the first from rustls), the key
  file an unencrypted private key (PKCS#8 ``PRIVATE KEY``, ``RSA PRIVATE KEY`` or ``EC
  PRIVATE KEY``: granian is given no passphrase, and the ``ssl`` module would prompt for
  one on the terminal);
- the first certificate is X.509 version 3 (webpki refuses 1 and 2: the panic of issue
  49), with no issuer or subject unique identifier, and no critical extension besides those
  webpki reads (key usage, subject alternative name, basic constraints, name constraints,
  CRL distribution points, extended key usage), none twice;
- it is in force now: not before its notBefore, not after its notAfter (rustls serves an
  expired certificate without a word; every client refuses it). Only the first
  certificate's dates are checked: a chain may carry an expired cross-signed certificate
  that clients skip;
- its key is one that ring signs with: RSA of 2048, 3072 or 4096 bits (ring takes no other
  size: 2056, 2560, 6144 and 8192 were refused), ECDSA on P-256 or P-384 in the uncompressed
  form, or Ed25519 (DSA, Ed448, P-521, secp256k1 and RSA-PSS keys were refused); an EC key
  file carries its public key and names its curve (ring refuses a key without them);
- the key goes with the first certificate (``ssl``'s ``load_cert_chain``); when it goes
  with a later one, the file's order is wrong, and the line says so.

Warned of, in one line each, while the service still serves: a certificate that expires
within :data:`EXPIRY_WARNING` seconds, and a key file that its group or other users may
read (or write). The DER is read by the small reader below (definite lengths, one-byte
tags), no further than these checks need; nothing here verifies a signature.
"""

import base64
import binascii
import datetime
import os
import re
import ssl
import stat
import tempfile
import time
from dataclasses import dataclass, field

EXPIRY_WARNING = 7 * 24 * 3600  # seconds: a certificate this close to its end is warned of
# The critical extensions webpki reads (id-ce 2.5.29.x); any other critical one it refuses.
KNOWN_CRITICAL = {"2.5.29.15", "2.5.29.17", "2.5.29.19", "2.5.29.30", "2.5.29.31",
                  "2.5.29.37"}
RSA = "1.2.840.113549.1.1.1"
EC = "1.2.840.10045.2.1"
CURVES = {"1.2.840.10045.3.1.7": "P-256", "1.3.132.0.34": "P-384"}
ED25519 = "1.3.101.112"
RSA_BITS = (2048, 3072, 4096)
KEY_NAMES = {  # what a refused key is, by its algorithm (or curve)
    "1.2.840.10040.4.1": "DSA", "1.3.101.113": "Ed448", "1.3.101.110": "X25519",
    "1.3.101.111": "X448", "1.2.840.113549.1.1.10": "RSA-PSS", "1.3.132.0.35": "P-521",
    "1.3.132.0.10": "secp256k1"}
TAKEN = ("granian's TLS (rustls with ring) signs with RSA keys of 2048, 3072 or 4096 bits, "
         "ECDSA on P-256 or P-384, or Ed25519")
# A block begins at a line's start, as rustls reads it (a byte-order mark before the first
# one hid it from rustls: the hostile pass on issue 49).
PEM = re.compile(rb"^-----BEGIN ([A-Z0-9 ]+)-----\r?\n(.*?)-----END \1-----",
                 re.DOTALL | re.MULTILINE)
MAX_SIZE = 1 << 20  # bytes: a certificate chain or a key is a few kilobytes
KEY_LABELS = {b"PRIVATE KEY", b"RSA PRIVATE KEY", b"EC PRIVATE KEY", b"ENCRYPTED PRIVATE KEY",
              b"DSA PRIVATE KEY"}


class TlsFileError(Exception):
    """A certificate or key that would not be served: ``setting`` names the file's."""

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(problem)
        self.setting = setting


class _Malformed(ValueError):
    """DER that is not what the reader expects."""


@dataclass
class Checked:
    """What :func:`check` found: the warnings to log (each one line)."""

    warnings: list[str] = field(default_factory=list)


def check(certificate: str, key: str, now: float | None = None) -> Checked:
    """Check the pair as the module's docstring says: TlsFileError for a refusal."""
    now = time.time() if now is None else now
    cert_pem = _read("tls_certificate", certificate)
    key_pem = _read("tls_key", key)
    blocks = [(label, der) for label, der in _blocks("tls_certificate", cert_pem)
              if label == b"CERTIFICATE"]
    if not blocks:
        raise TlsFileError("tls_certificate", "no certificate in the file (a PEM block "
                                              "-----BEGIN CERTIFICATE-----)")
    checked = Checked()
    try:
        _check_certificate(certificate, blocks[0][1], now, checked)
    except (_Malformed, IndexError) as exc:
        raise TlsFileError("tls_certificate", f"the first certificate is not DER that X.509 "
                                              f"reads ({exc})") from None
    try:
        _check_key(key_pem)
    except (_Malformed, IndexError) as exc:
        raise TlsFileError("tls_key", f"the private key is not DER as expected ({exc})"
                           ) from None
    _check_pair(certificate, key, [der for _, der in blocks])
    checked.warnings.extend(_key_mode(key))
    return checked


def _read(setting: str, path: str) -> bytes:
    """The file, if it is a regular one of at most MAX_SIZE bytes: a FIFO, a device
    (``/dev/zero``) or a huge file would hang the start or fill its memory."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO: no wait here
    except OSError as exc:
        raise TlsFileError(setting, f"cannot read {path}: {exc.strerror}") from None
    info = os.fstat(descriptor)
    if not stat.S_ISREG(info.st_mode):
        os.close(descriptor)
        raise TlsFileError(setting, f"{path} is not a regular file")
    if info.st_size > MAX_SIZE:
        os.close(descriptor)
        raise TlsFileError(setting, f"{path} is {info.st_size} bytes: more than "
                                    f"{MAX_SIZE} is no certificate or key")
    with open(descriptor, "rb") as file:
        try:
            return file.read(MAX_SIZE + 1)
        except OSError as exc:
            raise TlsFileError(setting, f"cannot read {path}: {exc.strerror}") from None


def _blocks(setting: str, pem: bytes) -> list[tuple[bytes, bytes]]:
    """Every PEM block of ``pem`` as (label, DER); a header (``Proc-Type: 4,ENCRYPTED``)
    is kept in the DER's place as ``b"encrypted"``."""
    found = []
    for match in PEM.finditer(pem):
        label, body = match.group(1), match.group(2)
        if b"Proc-Type:" in body and b"ENCRYPTED" in body:
            found.append((label, b"encrypted"))
            continue
        try:
            der = base64.b64decode(b"".join(body.split()), validate=True)
        except binascii.Error:
            raise TlsFileError(setting, f"a {label.decode()} block is not base64") from None
        found.append((label, der))
    return found


def _check_certificate(path: str, der: bytes, now: float, checked: Checked) -> None:
    tag, start, end = _element(der, 0, len(der))
    if tag != 0x30 or end != len(der):
        raise _Malformed("not one SEQUENCE")
    tbs = _children(der, *_expect(_children(der, start, end), 0, 0x30))
    at = 0
    version = 1
    if tbs and tbs[0][0] == 0xA0:
        s, e = _expect(_children(der, tbs[0][1], tbs[0][2]), 0, 0x02)
        version = int.from_bytes(der[s:e], "big", signed=True) + 1
        at = 1
    if version != 3:
        raise TlsFileError("tls_certificate", f"the certificate is X.509 version {version}, "
                           "and granian's TLS (rustls) serves version 3 only: make it again "
                           "with version 3 extensions (openssl x509 -req ... -extfile FILE, "
                           "the file naming its subjectAltName)")
    fields = tbs[at:]
    if len(fields) < 6 or [t for t, _, _ in fields[:6]] != [0x02, 0x30, 0x30, 0x30, 0x30,
                                                            0x30]:
        raise _Malformed("its fields are not serial, algorithm, issuer, validity, subject, "
                         "key")
    not_before, not_after = (_time(der, *child)
                             for child in _children(der, fields[3][1], fields[3][2]))
    _check_dates(path, not_before, not_after, now, checked)
    _check_public_key(der, fields[5])
    rest = fields[6:]
    if [t for t, _, _ in rest if t != 0xA3]:
        raise TlsFileError("tls_certificate", "the certificate carries an issuer or subject "
                                              "unique identifier, which webpki refuses")
    for _, s, e in rest:
        _check_extensions(der, *_expect(_children(der, s, e), 0, 0x30))


def _check_dates(path: str, not_before: datetime.datetime, not_after: datetime.datetime,
                 now: float, checked: Checked) -> None:
    current = datetime.datetime.fromtimestamp(now, datetime.timezone.utc)
    if current > not_after:
        raise TlsFileError("tls_certificate", f"the certificate expired on {_when(not_after)}:"
                           " renew it, write the new one over the file and start again "
                           "('plant-store docs tls')")
    if current < not_before:
        raise TlsFileError("tls_certificate", f"the certificate is valid only from "
                           f"{_when(not_before)}, and it is {_when(current)}: check the "
                           "clock, or serve the certificate in force")
    left = (not_after - current).total_seconds()
    if left < EXPIRY_WARNING:
        checked.warnings.append(
            f"the TLS certificate {path} expires on {_when(not_after)}, in "
            f"{left / 86400:.1f} days: renew it, write it over the file and restart the "
            "service ('plant-store docs tls'); clients refuse it from then on")


def _when(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _check_public_key(der: bytes, spki: tuple[int, int, int]) -> None:
    children = _children(der, spki[1], spki[2])
    algorithm = _children(der, *_expect(children, 0, 0x30))
    oid = _oid(der, *_expect(algorithm, 0, 0x06))
    s, e = _expect(children, 1, 0x03)
    bits = der[s + 1:e]
    if oid == RSA:
        modulus = _children(bits, *_expect([_element(bits, 0, len(bits))], 0, 0x30))
        ms, me = _expect(modulus, 0, 0x02)
        size = int.from_bytes(bits[ms:me], "big").bit_length()
        if size not in RSA_BITS:
            raise TlsFileError("tls_certificate", f"the certificate's key is RSA of {size} "
                                                  f"bits, and {TAKEN}")
        return
    if oid == EC:
        params = algorithm[1:2]
        curve = _oid(der, *params[0][1:]) if params and params[0][0] == 0x06 else "explicit"
        if curve not in CURVES:
            name = KEY_NAMES.get(curve, f"the curve {curve}")
            raise TlsFileError("tls_certificate", f"the certificate's key is ECDSA on {name},"
                                                  f" and {TAKEN}")
        if bits[:1] != b"\x04":
            raise TlsFileError("tls_certificate", "the certificate's EC key is in the "
                                                  f"compressed form, and {TAKEN} in the "
                                                  "uncompressed form")
        return
    if oid != ED25519:
        name = KEY_NAMES.get(oid, f"of the algorithm {oid}")
        raise TlsFileError("tls_certificate", f"the certificate's key is {name}, and "
                                              f"{TAKEN}")


def _check_extensions(der: bytes, start: int, end: int) -> None:
    seen = set()
    for tag, s, e in _children(der, start, end):
        if tag != 0x30:
            raise _Malformed("an extension is not a SEQUENCE")
        parts = _children(der, s, e)
        oid = _oid(der, *_expect(parts, 0, 0x06))
        critical = (len(parts) == 3 and parts[1][0] == 0x01
                    and der[parts[1][1]:parts[1][2]] != b"\x00")
        if oid in seen and oid.startswith("2.5.29."):
            raise TlsFileError("tls_certificate", f"the certificate carries the extension "
                                                  f"{oid} twice, which webpki refuses")
        seen.add(oid)
        if critical and oid not in KNOWN_CRITICAL:
            raise TlsFileError("tls_certificate", f"the certificate marks the extension "
                                                  f"{oid} critical, and webpki (granian's "
                                                  "TLS) refuses a critical extension it does "
                                                  "not know")


def _check_key(pem: bytes) -> None:
    keys = [(label, der) for label, der in _blocks("tls_key", pem) if label in KEY_LABELS]
    if not keys:
        raise TlsFileError("tls_key", "no private key in the file (a PEM block -----BEGIN "
                                      "PRIVATE KEY-----, RSA PRIVATE KEY or EC PRIVATE KEY)")
    label, der = keys[0]
    if der == b"encrypted" or label == b"ENCRYPTED PRIVATE KEY":
        raise TlsFileError("tls_key", "the private key is encrypted, and granian is given no "
                                      "passphrase: keep it decrypted (openssl pkey -in KEY "
                                      "-out PLAIN), readable by the service's user only")
    if label == b"DSA PRIVATE KEY":
        raise TlsFileError("tls_key", f"the private key is DSA, and {TAKEN}")
    if label == b"EC PRIVATE KEY":
        _check_ec_key(der, *_element(der, 0, len(der))[1:], curve=None)
    elif label == b"PRIVATE KEY":
        _, start, end = _element(der, 0, len(der))
        parts = _children(der, start, end)
        algorithm = _children(der, *_expect(parts, 1, 0x30))
        if _oid(der, *_expect(algorithm, 0, 0x06)) == EC:
            params = algorithm[1:2]
            named = bool(params) and params[0][0] == 0x06
            s, e = _expect(parts, 2, 0x04)
            _check_ec_key(der, *_element(der, s, e)[1:], curve=named)


def _check_ec_key(der: bytes, start: int, end: int, curve: bool | None) -> None:
    """An ECPrivateKey (RFC 5915): ring needs its public key, and a named curve (``curve``
    says whether PKCS#8's algorithm named it; None for a SEC1 file, which names it
    within)."""
    parts = _children(der, start, end)
    tags = [tag for tag, _, _ in parts]
    if curve is None:
        named = 0xA0 in tags and _children(der, *parts[tags.index(0xA0)][1:])[0][0] == 0x06
    else:
        named = curve
    if not named:
        raise TlsFileError("tls_key", "the EC private key gives its curve's parameters "
                                      "explicitly, and ring reads only a named curve: "
                                      "openssl ec -in KEY -param_enc named_curve -out NEW")
    if 0xA1 not in tags:
        raise TlsFileError("tls_key", "the EC private key leaves out its public key, which "
                                      "ring needs: openssl ec -in KEY -out NEW writes it")


def _check_pair(certificate: str, key: str, chain: list[bytes]) -> None:
    """``ssl`` says whether the key goes with the first certificate; if not, whether it
    goes with a later one (the file's order is then wrong)."""
    try:
        _load(certificate, key)
        return
    except ssl.SSLError as exc:
        reason = exc.reason or str(exc)
    for at, der in enumerate(chain[1:], start=2):
        with tempfile.NamedTemporaryFile("w", suffix=".pem") as single:
            single.write(ssl.DER_cert_to_PEM_cert(der))
            single.flush()
            try:
                _load(single.name, key)
            except ssl.SSLError:
                continue
        raise TlsFileError("tls_certificate", f"the key goes with certificate {at} of the "
                           "file, not with the first: the server's own certificate comes "
                           "first, then the chain that signed it")
    raise TlsFileError("tls_certificate", f"not a certificate and key that go together "
                                          f"({reason})")


def _load(certificate: str, key: str) -> None:
    # b"": an encrypted key (refused before) fails here rather than prompt on a terminal.
    ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
        certificate, key, password=b"")


def _key_mode(key: str) -> list[str]:
    mode = os.stat(key).st_mode
    who = [name for name, bits in (("its group", stat.S_IRWXG), ("every user", stat.S_IRWXO))
           if mode & bits]
    if not who:
        return []
    return [f"the TLS key {key} may be read by {' and '.join(who)} (mode "
            f"{stat.S_IMODE(mode):04o}): whoever reads it can pose as this service; "
            f"chmod 600 it, owned by the service's user"]


def _element(data: bytes, at: int, limit: int) -> tuple[int, int, int]:
    """The DER element at ``at`` (ending by ``limit``): its tag, where its contents start
    and where they end."""
    if at + 2 > limit:
        raise _Malformed("truncated")
    tag, length = data[at], data[at + 1]
    if tag & 0x1F == 0x1F:
        raise _Malformed("a multi-byte tag")
    at += 2
    if length & 0x80:
        count = length & 0x7F
        if not 1 <= count <= 4 or at + count > limit:
            raise _Malformed("a length of no definite form")
        length = int.from_bytes(data[at:at + count], "big")
        at += count
    if at + length > limit:
        raise _Malformed("truncated")
    return tag, at, at + length


def _children(data: bytes, start: int, end: int) -> list[tuple[int, int, int]]:
    """The elements one after another from ``start`` to ``end``."""
    found = []
    while start < end:
        found.append(_element(data, start, end))
        start = found[-1][2]
    return found


def _expect(children: list[tuple[int, int, int]], index: int, tag: int) -> tuple[int, int]:
    """Where the contents of ``children[index]`` start and end; it must have ``tag``."""
    if index >= len(children) or children[index][0] != tag:
        raise _Malformed(f"expected the tag {tag:#04x} at {index}")
    return children[index][1], children[index][2]


def _oid(data: bytes, start: int, end: int) -> str:
    arcs, value = [], 0
    for byte in data[start:end]:
        value = value << 7 | byte & 0x7F
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    if not arcs:
        raise _Malformed("an empty OBJECT IDENTIFIER")
    first = min(arcs[0] // 40, 2)
    return ".".join(map(str, [first, arcs[0] - 40 * first, *arcs[1:]]))


def _time(data: bytes, tag: int, start: int, end: int) -> datetime.datetime:
    """A UTCTime or GeneralizedTime, as X.509 writes them (UTC, to the second)."""
    text = data[start:end].decode("ascii", "replace")
    if not re.fullmatch(r"[0-9]{12}Z" if tag == 0x17 else r"[0-9]{14}Z", text):
        raise _Malformed(f"the time {text!r}")
    try:
        if tag == 0x17:  # UTCTime: YYMMDDHHMMSSZ, the years 1950 to 2049
            moment = datetime.datetime.strptime(text, "%y%m%d%H%M%SZ")
            if moment.year >= 2050:
                moment = moment.replace(year=moment.year - 100)
        elif tag == 0x18:
            moment = datetime.datetime.strptime(text, "%Y%m%d%H%M%SZ")
        else:
            raise _Malformed("a validity that is not a time")
    except ValueError:
        raise _Malformed(f"the time {text!r}") from None
    return moment.replace(tzinfo=datetime.timezone.utc)
