#!/usr/bin/env python3
"""Summarizes the loss-tolerant controller's per-round trace.

    HAUL_LOG=haul_congestion=trace <a haul or haul-netsim run> 2> trace.txt
    python3 bench/controller-rounds.py trace.txt

The trace has one `round` line per round (mode, acked, lost, round_us,
srtt_ms, loss, rate; see `end_round` in crates/haul-congestion/src/rate.rs).
Rounds of the other side of the connection (a receiver that sends only
acknowledgements) are left out: startup rounds with under 2,000 bytes.
Prints the acknowledged rate, the loss and the mean RTT per stretch of
time, and per cruise phase: where a transfer's time goes. Run it on one
connection's trace at a time.
"""
import re
import sys
from collections import defaultdict

ANSI = re.compile(r"\x1b\[[0-9;]*m")
FIELD = re.compile(r"(\w+)=([^ ]+)")
MODE = re.compile(r"mode=(\w+)(?: \{ (?:phase: (\d))?)?")


def rounds(path):
    for line in open(path, encoding="utf-8", errors="replace"):
        line = ANSI.sub("", line)
        if " round " not in line or "round_us=" not in line:
            continue
        kv = dict(FIELD.findall(line.split(" round ", 1)[1]))
        m = MODE.search(line)
        mode = m.group(1) + (m.group(2) or "")
        acked, lost = int(kv["acked"]), int(kv["lost"])
        if acked + lost < 2000 and mode == "Startup":
            continue
        yield dict(mode=mode, acked=acked, lost=lost, secs=int(kv["round_us"]) / 1e6,
                   srtt=int(kv["srtt_ms"]), rate=float(kv["rate"]))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: controller-rounds.py TRACE")
    rs = list(rounds(sys.argv[1]))
    if not rs:
        sys.exit("no round lines with round_us (HAUL_LOG=haul_congestion=trace)")
    t, ends = 0.0, []
    for r in rs:
        t += r["secs"]
        ends.append(t)
    total = sum(r["acked"] for r in rs)
    print(f"{len(rs)} rounds, {t:.2f} s, {total / 1e6:.1f} MB acked, {total * 8 / t / 1e6:.1f} Mbit/s")
    edges = [0, 1, 5, 10, 20, 40, 80, 160]
    edges = [e for e in edges if e < t - 0.5] + [t - 0.5, t + 1]
    for lo, hi in zip(edges, edges[1:]):
        sel = [r for r, e in zip(rs, ends) if lo <= e < hi]
        if not sel:
            continue
        secs = sum(r["secs"] for r in sel)
        acked = sum(r["acked"] for r in sel)
        lost = sum(r["lost"] for r in sel)
        print(f"  {lo:6.1f}-{hi:6.1f} s: {acked * 8 / secs / 1e6:7.1f} Mbit/s acked, "
              f"loss {lost / max(acked + lost, 1):.3f}, RTT {sum(r['srtt'] for r in sel) / len(sel):5.1f} ms, "
              f"rate {sum(r['rate'] for r in sel) * 8 / len(sel) / 1e6:6.1f} Mbit/s")
    phases = defaultdict(lambda: [0, 0.0, 0, 0])
    for r, e in zip(rs, ends):
        if 1 < e < t - 0.5:
            p = phases[r["mode"]]
            p[0] += r["acked"]
            p[1] += r["secs"]
            p[2] += 1
            p[3] += r["srtt"]
    for mode in sorted(phases):
        acked, secs, n, srtt = phases[mode]
        print(f"  {mode:9}: {acked * 8 / secs / 1e6:7.1f} Mbit/s acked in {n} rounds, RTT {srtt / n:5.1f} ms")


if __name__ == "__main__":
    main()
