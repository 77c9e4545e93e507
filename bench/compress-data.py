#!/usr/bin/env python3
"""The data -z is measured on (bench/compress.sh, bench/compress-fanout.sh):
DIR/csv/stations.csv (CSV-like text), DIR/float/sst.raw (a NetCDF-like
float32 field) and DIR/random/random.bin, MIB MiB each.

    python3 bench/compress-data.py DIR MIB
"""
import math, os, random, struct, sys
root, mib = sys.argv[1], int(sys.argv[2])
size = mib << 20
rng = random.Random(36)
os.makedirs(f"{root}/csv", exist_ok=True)
with open(f"{root}/csv/stations.csv", "w") as f:
    f.write("time,station,temperature,pressure,humidity,flag\n")
    n = 0
    while f.tell() < size:
        t = n * 60
        f.write(f"2026-{1 + t // 2592000 % 12:02d}-{1 + t // 86400 % 28:02d}T{t // 3600 % 24:02d}:{t // 60 % 60:02d}:00Z,"
                f"ST{rng.randint(1, 400):04d},{rng.gauss(12, 6):.2f},{rng.gauss(1013, 8):.1f},{rng.randint(20, 100)},"
                f"{'ok' if rng.random() > 0.01 else 'suspect'}\n")
        n += 1
os.makedirs(f"{root}/float", exist_ok=True)
with open(f"{root}/float/sst.raw", "wb") as f:
    # A smooth field (sea-surface temperature-like) on a lat x lon grid,
    # float32, with sensor noise in the last bits.
    nlon = 1440
    row = 0
    while f.tell() < size:
        lat = -90 + (row % 720) * 0.25
        vals = [20 * math.cos(math.radians(lat)) + 2 * math.sin(i / 90) + rng.gauss(0, 0.01) for i in range(nlon)]
        f.write(struct.pack(f"<{nlon}f", *vals))
        row += 1
os.makedirs(f"{root}/random", exist_ok=True)
with open(f"{root}/random/random.bin", "wb") as f:
    f.write(os.urandom(size))
