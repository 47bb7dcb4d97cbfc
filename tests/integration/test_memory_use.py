"""Plants created at run time cost the JSON-file store what plants read at start do: no
per-record buffer is kept beside the record (orjson 3.11 and later return bytes holding
about 4 KiB each; the store keeps copies of their own size)."""

import subprocess
import sys

MEASURE = """
import sys, tempfile
from plant_store.stores import JsonFileStore
from plant_store.stores.records import Plant
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
with JsonFileStore(tempfile.mkdtemp(), fsync=False, compact_share=0) as store:
    store.create(Plant(-1, "warm"), ["http://127.0.0.1:9/"])
    before = rss()
    for i in range(20000):
        store.create(Plant(i, f"plant {i}", "tag"), ["http://127.0.0.1:9/"])
    print((rss() - before) / 20000)
"""


def test_a_plant_created_at_run_time_costs_under_a_kilobyte():
    out = subprocess.run([sys.executable, "-c", MEASURE], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert float(out) < 1024, f"{float(out):.0f} bytes a plant"
