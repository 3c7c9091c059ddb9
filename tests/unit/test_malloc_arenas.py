"""local.malloc_arenas: a local run's processes keep image-sized buffers for the next
image instead of giving them back to the system and faulting them in again."""

import json
import os
import subprocess
import sys

import pytest

from recordbeam.local import malloc_arenas

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")

NAMES = ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")

# What a worker does per image: a 140 KB buffer read, another made from it (the record),
# both freed. The page faults per round, after a warm-up, in a process that tuned malloc
# or not, and in a child it forks afterwards (local workers are forked).
PROBE = """
import json, os, resource, sys
from recordbeam.local.malloc_arenas import tune_malloc
if sys.argv[1] == "tuned":
    tune_malloc()

def faults_per_round():
    data = os.urandom(140_000)
    for _ in range(50):
        bytes(bytearray(data))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(2000):
        bytes(bytearray(data))
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 2000

read, write = os.pipe()
if os.fork() == 0:
    os.write(write, json.dumps(faults_per_round()).encode())
    os._exit(0)
os.close(write)
child = json.loads(os.read(read, 100))
os.wait()
print(json.dumps({"faults": faults_per_round(), "forked": child,
                  "environment": {k: os.environ.get(k) for k in sys.argv[2:]}}))
"""


def probe(mode: str, **environment: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in NAMES}
    env.update(environment)
    done = subprocess.run([sys.executable, "-c", PROBE, mode, *NAMES], capture_output=True, text=True,
                          env=env, check=True)
    return json.loads(done.stdout)


def test_freed_image_buffers_stay_for_the_next_image_in_the_process_and_its_forks():
    plain, tuned = probe("plain"), probe("tuned")
    assert plain["faults"] >= 10, plain  # glibc gives the heap's top back every round
    assert tuned["faults"] < 1 and tuned["forked"] < 1, tuned
    assert tuned["environment"] == {  # for workers started as new processes
        "MALLOC_ARENA_MAX": "2",
        "MALLOC_MMAP_THRESHOLD_": str(malloc_arenas.MMAP_THRESHOLD),
        "MALLOC_TRIM_THRESHOLD_": str(malloc_arenas.TRIM_THRESHOLD),
    }


def test_a_value_the_user_set_is_kept():
    tuned = probe("tuned", MALLOC_TRIM_THRESHOLD_="131072")
    assert tuned["environment"]["MALLOC_TRIM_THRESHOLD_"] == "131072"
    assert tuned["faults"] >= 10, tuned  # and applied: the user's 128 KiB gives pages back
