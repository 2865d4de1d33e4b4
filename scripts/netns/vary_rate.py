#!/usr/bin/env python3
"""Varies the shaped access rates of a netns.sh harness in time, as cross traffic at a node's
provider would: each node's upload (tbf on its eth0) and download (tbf on its switch port) is
its own mean-preserving log-normal AR(1) process, the same process as the simulator's
`network.variation.access_cv` / `access_correlation_s` (netsim/wan.cc attach_bandwidth_variation):
log(rate / mean) is stationary N(-s^2/2, s^2) with s^2 = ln(1 + cv^2), stepped every quarter
correlation time with coefficient exp(-1/4). Seeded: a seed gives the same rates.

Runs until SIGTERM/SIGINT; writes one line per change to --log (t_s, node, direction, mbit).

usage: vary_rate.py --prefix P --nodes N --mean-mbit M --cv C --correlation-s T --seed S
                    --hz HZ [--log FILE] [--switch-ns NS]
The tbf's burst follows the rate (rate / HZ, at least 16 kB), as netns.sh sets it.
"""
import argparse
import math
import random
import signal
import subprocess
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prefix", required=True)
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--mean-mbit", type=float, required=True)
    p.add_argument("--cv", type=float, required=True)
    p.add_argument("--correlation-s", type=float, required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--hz", type=int, required=True, help="the kernel's timer frequency")
    p.add_argument("--log", default=None)
    p.add_argument("--switch-ns", default=None,
                   help="namespace of the ports (default PREFIX-sw; 'root' for a bridged harness)")
    a = p.parse_args()
    if a.cv <= 0 or a.correlation_s <= 0 or a.mean_mbit <= 0 or a.nodes < 1:
        sys.exit("vary_rate.py: --cv, --correlation-s, --mean-mbit and --nodes must be > 0")
    switch_ns = a.switch_ns or a.prefix + "-sw"
    dt = a.correlation_s / 4
    phi = math.exp(-dt / a.correlation_s)
    sigma = math.sqrt(math.log1p(a.cv * a.cv))
    # One stream per (node, direction), independent of the others' and of the step count.
    links = []
    for i in range(a.nodes):
        links.append((i, "up", ["ip", "netns", "exec", f"{a.prefix}-{i}"], "eth0"))
        on_port = [] if switch_ns == "root" else ["ip", "netns", "exec", switch_ns]
        links.append((i, "down", on_port, f"{a.prefix}-h{i}"))
    rngs = [random.Random(f"{a.seed}/{i}/{d}") for i, d, _, _ in links]
    x = [sigma * r.gauss(0, 1) for r in rngs]

    stop = []
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.append(1))
    log = open(a.log, "w") if a.log else None
    if log:
        log.write("t_s\tnode\tdirection\tmbit\n")
    t0 = time.monotonic()
    k = 0
    while not stop:
        for j, (i, d, ns, dev) in enumerate(links):
            if k > 0:
                x[j] = phi * x[j] + math.sqrt(1 - phi * phi) * sigma * rngs[j].gauss(0, 1)
            mbit = max(1.0, a.mean_mbit * math.exp(x[j] - sigma * sigma / 2))
            burst = max(16384, int(mbit * 125000 / a.hz))
            subprocess.run(ns + ["tc", "qdisc", "change", "dev", dev, "root", "tbf", "rate",
                                 f"{mbit:.3f}mbit", "burst", str(burst), "latency", "400ms"],
                           check=True)
            if log:
                log.write(f"{time.monotonic() - t0:.3f}\t{i + 1}\t{d}\t{mbit:.3f}\n")
        if log:
            log.flush()
        k += 1
        # The next step at t0 + k dt (no drift), in short sleeps so that a signal ends it soon.
        while not stop and time.monotonic() < t0 + k * dt:
            time.sleep(min(0.1, max(0.0, t0 + k * dt - time.monotonic())))
    if log:
        log.close()


if __name__ == "__main__":
    main()
