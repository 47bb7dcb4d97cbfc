"""The shipped systemd units, and systemd-analyze to judge them."""

import shutil

from support.needs import needed

UNITS = ["plant-store.service.example", "plant-store-gunicorn.service.example"]
ANALYZE = shutil.which("systemd-analyze")
OK = 2.0  # systemd's scale: up to 1.9 "OK"... 10 "UNSAFE"; 7.9 before the hardening


def analyze():
    return needed(ANALYZE, "systemd-analyze is not installed", "systemd package", "unit")
