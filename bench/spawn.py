"""Run one command and write its wall seconds, exit code, peak RSS (wait4's ru_maxrss) and CPU seconds as JSON.

    python -I -S bench/spawn.py RESULT.json COMMAND [ARGS...]

Why a launcher: on Linux a child's ru_maxrss starts at the RSS of the process that forked it (exec records the
old address space's high-water mark), so a command started straight from the benchmark runner (~60-80 MB with
boto3 and the Azure SDK loaded) could never show less than that. Started from this bare interpreter (-I -S,
stdlib only), the floor is ~10 MB.
"""

import json
import os
import sys
import time

result, argv = sys.argv[1], sys.argv[2:]
start = time.monotonic()
pid = os.posix_spawnp(argv[0], argv, os.environ)
_pid, status, usage = os.wait4(pid, 0)
wall = time.monotonic() - start
with open(result, "w") as f:
    json.dump({"wall_s": wall, "maxrss_kib": usage.ru_maxrss, "cpu_s": usage.ru_utime + usage.ru_stime,
               "rc": os.waitstatus_to_exitcode(status)}, f)
