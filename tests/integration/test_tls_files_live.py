"""plant_store.serving.tls_files (issue 49, finding 8) on files that openssl makes (so
here, not in tests/unit, which starts no process): each certificate or key that granian's
worker panicked on, or served without a word, is refused with the setting to fix; what
still serves is warned of. tests/integration/test_tls_live.py starts the service with
each; tests/unit/serving/test_tls_files.py checks the DER reader on bytes."""

import datetime

import pytest

from plant_store.serving import tls_files
from support import bad_certificates


@pytest.mark.parametrize("kind", sorted(bad_certificates.REFUSED))
def test_each_bad_file_is_refused_naming_its_setting(kind, tmp_path):
    cert, key = bad_certificates.make(kind, tmp_path)
    setting, said = bad_certificates.REFUSED[kind]
    with pytest.raises(tls_files.TlsFileError) as refused:
        tls_files.check(str(cert), str(key))
    assert refused.value.setting == setting
    assert said in str(refused.value) and "\n" not in str(refused.value)


def test_a_good_pair_passes_and_warnings_say_what_still_serves(tmp_path):
    cert, key = bad_certificates.make("good", tmp_path / "good")
    assert tls_files.check(str(cert), str(key)).warnings == []
    key.chmod(0o644)
    [line] = tls_files.check(str(cert), str(key)).warnings
    assert line.startswith(f"the TLS key {key} may be read by its group and every user "
                           "(mode 0644)")
    key.chmod(0o640)
    [line] = tls_files.check(str(cert), str(key)).warnings
    assert "may be read by its group (mode 0640)" in line
    key.chmod(0o600)
    cert, key = bad_certificates.make("expiring", tmp_path / "expiring")
    [line] = tls_files.check(str(cert), str(key)).warnings
    assert line.startswith(f"the TLS certificate {cert} expires on ") and "in 3.0 days" in line
    # Thirty days from its end, no warning; past its end, refused.
    cert, key = bad_certificates.make("good", tmp_path / "later")
    end = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=30)
    assert tls_files.check(str(cert), str(key),
                           now=(end - datetime.timedelta(days=8)).timestamp()).warnings == []
    assert tls_files.check(str(cert), str(key),
                           now=(end - datetime.timedelta(days=6)).timestamp()).warnings
    with pytest.raises(tls_files.TlsFileError, match="the certificate expired on"):
        tls_files.check(str(cert), str(key), now=(end + datetime.timedelta(days=1)).timestamp())


@pytest.mark.parametrize("which", ["tls_certificate", "tls_key"])
@pytest.mark.parametrize("bad", ["fifo", "/dev/zero", "huge", "directory"])
def test_a_file_that_is_no_regular_file_or_too_big_is_refused_at_once(which, bad, tmp_path):
    """The hostile pass on issue 49: a FIFO as the key or certificate hung the start, and
    /dev/zero filled its memory at 340 MB/s; a 200 MB file was read whole."""
    import os
    import time

    cert, key = bad_certificates.make("good", tmp_path)
    target = tmp_path / "bad"
    if bad == "fifo":
        os.mkfifo(target)
    elif bad == "huge":
        target.write_bytes(cert.read_bytes() + b"\n" * (tls_files.MAX_SIZE + 1))
    elif bad == "directory":
        target.mkdir()
    else:
        target = bad
    files = {"tls_certificate": str(cert), "tls_key": str(key), which: str(target)}
    started = time.monotonic()
    with pytest.raises(tls_files.TlsFileError) as refused:
        tls_files.check(files["tls_certificate"], files["tls_key"])
    assert time.monotonic() - started < 2
    assert refused.value.setting == which
    said = "bytes: more than" if bad == "huge" else "is not a regular file"
    assert said in str(refused.value), str(refused.value)


def test_a_byte_order_mark_before_the_certificate_is_refused(tmp_path):
    """The hostile pass on issue 49: the check read the block after a UTF-8 byte-order
    mark, rustls did not, and every worker panicked (NoCertificatesPresented)."""
    cert, key = bad_certificates.make("good", tmp_path)
    cert.write_bytes(b"\xef\xbb\xbf" + cert.read_bytes())
    with pytest.raises(tls_files.TlsFileError, match="no certificate in the file"):
        tls_files.check(str(cert), str(key))
