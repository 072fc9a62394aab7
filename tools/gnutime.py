#!/usr/bin/env python3
"""A stand-in for `/usr/bin/time -v CMD ...` on machines without GNU time (the GPU machine's image):
runs CMD and prints, on stderr, the five -v fields moeplan's benchmark scripts read."""
import os
import resource
import subprocess
import sys
import time

args = sys.argv[1:]
if args and args[0] == "-v":
    args = args[1:]
if not args:
    sys.exit("usage: gnutime.py [-v] CMD [ARGS...]")
t0 = time.monotonic()
rc = subprocess.call(args)
wall = time.monotonic() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
m, s = divmod(wall, 60)
sys.stderr.write(f"\tUser time (seconds): {ru.ru_utime:.2f}\n\tSystem time (seconds): {ru.ru_stime:.2f}\n"
                 f"\tElapsed (wall clock) time (h:mm:ss or m:ss): {int(m)}:{s:05.2f}\n"
                 f"\tMaximum resident set size (kbytes): {ru.ru_maxrss}\n\tExit status: {rc}\n")
sys.exit(rc)
