"""The job both schedulers' node-helper tests run (standard library only: it runs inside the
HTCondor chroot and as an unprivileged Slurm user alike).

Arguments: MEMORY_MIB (0: allocate nothing), MY_MARK, PEER_MARK. It prints its
Cpus_allowed_list and COSHARE_CPUS, asks the offload gate (line protocol) for one thread more
than its job declared, for its declaration, and for one more on top; creates MY_MARK and
waits for PEER_MARK (so the two jobs surely run side by side); then allocates MEMORY_MIB and
prints "survived", and ends with "done".
"""

from __future__ import annotations

import re

NODE_JOB = """#!/usr/bin/python3
# coshare node-helper test job: report cores and gate answers, meet the peer, allocate.
import os, socket, sys, time
mem_mib, me, peer = int(sys.argv[1]), sys.argv[2], sys.argv[3]
cpus = open("/proc/self/status").read().split("Cpus_allowed_list:")[1].split()[0]
print("cpus", cpus, os.environ.get("COSHARE_CPUS", "-"), flush=True)
threads = int(os.environ["COSHARE_DEVICE_THREADS"])
with socket.socket(socket.AF_UNIX) as s:
    s.connect(os.environ["COSHARE_GATE_SOCKET"])
    f = s.makefile("rw")
    for line in ("HELLO", f"ACQUIRE {threads + 1}", f"ACQUIRE {threads}", "TRY 1"):
        f.write(line + "\\n")
        f.flush()
        print("gate", line, "->", f.readline().strip(), flush=True)
open(me, "w").close()
deadline = time.monotonic() + 120
while not os.path.exists(peer) and time.monotonic() < deadline:  # run side by side
    time.sleep(0.1)
if mem_mib:
    block = bytearray(mem_mib << 20)
    print("survived", flush=True)
time.sleep(2)
print("done", flush=True)
"""


def check_gate_replies(out: str) -> None:
    """The job got its declared 60 threads from the gate and not one more."""
    gate = [line.split(" -> ")[1] for line in out.splitlines() if line.startswith("gate ")]
    assert re.fullmatch(r"OK job=\S+ devices=[01] threads=60", gate[0]), gate
    assert gate[1].startswith("ERR over_declared 61 threads asked"), gate
    assert gate[2].startswith("OK ") and gate[2].endswith(" 60"), gate
    assert gate[3].startswith("ERR would_deadlock this connection holds 60"), gate
