"""Runs and measures bench.py's commands from a process that stays small.

Why a separate process: Linux carries a process's RSS high-water mark across exec, so a child
spawned by a large process reports that process's RSS as its own `ru_maxrss` (a `python -c pass`
started from a 500 MiB parent "peaks" at 500 MiB). bench.py grows (rich, captured outputs); this
runner does not, so the peak RSS it reports for a child is the child's own.

Protocol: one JSON object per line on stdin,
  {"cmd": [...], "cwd": str, "stdout": path, "stderr": path, "timeout": seconds}
and one JSON object per line on stdout,
  {"wall_s", "cpu_s", "maxrss_kib", "returncode", "timed_out"}.
Wall is `perf_counter` around the child; CPU is user + system from `getrusage(RUSAGE_CHILDREN)`
before and after (it includes the grandchildren the child waited for, such as `-j` workers);
peak RSS is the child's from `wait4`. The child's output goes to the two files.
"""

import json
import os
import resource
import subprocess
import sys
import threading
import time


def run(req):
    with open(req["stdout"], "wb") as out, open(req["stderr"], "wb") as err:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            req["cmd"], cwd=req["cwd"], stdin=subprocess.DEVNULL, stdout=out, stderr=err
        )
        killed = threading.Event()

        def kill():
            killed.set()
            proc.kill()

        timer = threading.Timer(req["timeout"], kill)
        timer.start()
        try:
            _, status, ru = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4, not by Popen
    return {
        "wall_s": wall,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        # KiB on Linux, bytes on macOS.
        "maxrss_kib": ru.ru_maxrss / 1024 if sys.platform == "darwin" else ru.ru_maxrss,
        "returncode": proc.returncode,
        "timed_out": killed.is_set(),
    }


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            reply = run(json.loads(line))
        except Exception as exc:  # report, keep serving: one bad command must not end the run
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
