"""plant_store.serving.tls_files's DER reader, on bytes (tests/integration/test_tls_files_live.py
checks the files openssl makes)."""

import pytest

from plant_store.serving import tls_files


def test_utctime_years_fold_at_1950_and_generalized_time_reads_four_digits():
    assert tls_files._time(b"500101000000Z", 0x17, 0, 13).year == 1950
    assert tls_files._time(b"491231235959Z", 0x17, 0, 13).year == 2049
    assert tls_files._time(b"20991231235959Z", 0x18, 0, 15).year == 2099
    with pytest.raises(tls_files._Malformed):
        tls_files._time(b"2099123123595Z", 0x18, 0, 14)


def test_the_der_reader_refuses_what_runs_past_its_end():
    assert tls_files._element(b"\x30\x03\x02\x01\x05", 0, 5) == (0x30, 2, 5)
    assert tls_files._element(b"\x04\x81\x01\x00", 0, 4) == (0x04, 3, 4)
    for bad in (b"\x30\x04\x02\x01\x05", b"\x30\x80\x00\x00", b"\x1f\x01\x00", b"\x30"):
        with pytest.raises(tls_files._Malformed):
            tls_files._element(bad, 0, len(bad))
    assert tls_files._oid(bytes.fromhex("2a864886f70d010101"), 0, 9) == tls_files.RSA
    assert tls_files._oid(bytes.fromhex("2b6570"), 0, 3) == tls_files.ED25519
