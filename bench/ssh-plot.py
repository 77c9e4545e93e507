#!/usr/bin/env python3
"""Plots bench/ssh.sh's and bench/ssh-fanout.sh's results (issue 32).

Reads the result files they write (each ssh.sh file: an optional
`lab link: …` line, then per dataset `== big: …` or `== small: …` and the
`TOOL median …` lines; each ssh-fanout.sh file: `TOOL T(1)|T(8) … s` lines)
and draws, with gnuplot, OUT/ssh.png: on the left every tool's speed against
rsync -a over ssh on each link and dataset (1 = rsync, above is faster), on
the right each tool's T(8)/T(1) for a fan-out to 8 hosts (1 = perfect).

    python3 bench/ssh-plot.py OUT SSH_RESULT... -- [LABEL=]FANOUT_RESULT...

(LABEL names haul's bar from that file: its size, its plan.)
"""
import re
import subprocess
import sys


def ssh_rows(path):
    """[(label, {tool: seconds})] of one ssh.sh result file."""
    link, rows, current = "loopback", [], None
    for line in open(path):
        m = re.match(r"lab link: (.*?) \(", line)
        if m:
            link = m.group(1).replace("rate ", "").replace(" delay ", "\\n").replace(" loss ", "\\nloss ")
        m = re.match(r"== (\w+): (\d+) file\(s\), (\d+) MiB", line)
        if m:
            what = f"{m.group(3)} MiB" if m.group(1) == "big" else f"{m.group(2)} files"
            current = {}
            rows.append((f"{link}\\n{what}", current))
        m = re.match(r"\s+(\S+)\s+median\s+([\d.]+) s", line)
        if m and current is not None:
            current[m.group(1)] = float(m.group(2))
    return rows


def fanout_rows(path):
    """{tool: (T(1), T(8))} of one ssh-fanout.sh result file."""
    t = {}
    for line in open(path):
        m = re.match(r"(\S+)\s+T\((\d)\)\s+([\d.]+) s", line)
        if m:
            t.setdefault(m.group(1), {})[m.group(2)] = float(m.group(3))
    return {k: (v["1"], v["8"]) for k, v in t.items() if "1" in v and "8" in v}


def main():
    out, args = sys.argv[1], sys.argv[2:]
    split = args.index("--") if "--" in args else len(args)
    ssh_files, fan_files = args[:split], args[split + 1 :]
    tools = ["haul-tcp", "haul-quic", "haul-tunnel", "scp", "sftp"]
    speed = []
    for f in ssh_files:
        for label, times in ssh_rows(f):
            if "rsync" in times:
                speed.append((label, [times["rsync"] / times[t] if t in times else "NaN" for t in tools]))
    with open(f"{out}/ssh-speed.dat", "w") as d:
        d.write("row " + " ".join(tools) + "\n")
        for label, ratios in speed:
            d.write(f'"{label}" ' + " ".join(str(r) for r in ratios) + "\n")
    fan = {}
    for f in fan_files:
        label, _, path = f.rpartition("=")
        for tool, t in fanout_rows(path).items():
            fan[f"{tool} {label}" if label and tool == "haul" else tool] = t
    with open(f"{out}/ssh-fanout.dat", "w") as d:
        for tool, (t1, t8) in sorted(fan.items(), key=lambda kv: not kv[0].startswith("haul")):
            d.write(f'"{tool}" {t8 / t1:.3f}\n')
    cols = " , ".join(
        f"'{out}/ssh-speed.dat' using {i + 2}:xtic(1) title '{t}'" for i, t in enumerate(tools)
    )
    script = f"""set terminal png size 1600,650
set output '{out}/ssh.png'
set multiplot layout 1,2
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set grid ytics
set key top right
set logscale y
set yrange [0.005:5]
set ylabel 'speed against rsync -a over ssh (1 = rsync)'
set title 'haul over ssh against rsync, scp, sftp'
set xtics font ',8'
set bmargin 6
plot {cols}, 1 with lines lc rgb 'black' dt 2 notitle
unset logscale y
set yrange [0:*]
set ylabel 'T(8) / T(1)'
set title 'fan-out to 8 lab hosts over ssh (1 = as fast as one host)'
set xtics font ',9' rotate by -25
set key off
plot '{out}/ssh-fanout.dat' using 2:xtic(1) lc rgb '#4477aa', 1.15 with lines lc rgb 'red' dt 2 title 'target 1.15'
unset multiplot
"""
    with open(f"{out}/ssh.gp", "w") as g:
        g.write(script)
    subprocess.run(["gnuplot", f"{out}/ssh.gp"], check=True)
    print(f"plot: {out}/ssh.png")


if __name__ == "__main__":
    main()
