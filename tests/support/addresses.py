"""Addresses the tests give clients."""

CLIENT = "192.0.2.7"  # TEST-NET-1 (RFC 5737): the client a proxy forwards for
