#!/usr/bin/env python3
"""Fits the contention model's timing constants ([timing] of sim/optane.toml)
to the fitted points of `pmsim calibrate`: the six-DIMM bandwidth against
threads. Validation points are never read.

A coordinate search: each constant in turn is multiplied by 1 + step and by
1 / (1 + step); a change that lowers the cost is kept; the step halves when
no constant improves. The cost is the sum of squared relative errors at both
benchmark sizes (`--quick` and the default), plus 30 times the squared excess
of each error over 9 % (so no point is left far off for a lower mean).

    scripts/fit-timing.py [--pmsim target/release/pmsim] [--keep NAME=VALUE ...]

starts from the constants of sim/optane.toml (through `pmsim calibrate`'s
defaults) and prints the best [timing] section. `--keep` holds a constant
fixed (e.g. `--keep wpq_entries=64`).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

# nt_to_wpq_ns comes from FAST '20 Fig. 2 and write_buffers is a small whole
# number chosen on Fig. 4's one-thread point (sim/optane.toml): not searched.
FREE = ["flush_issue_ns", "flush_to_wpq_ns", "wpq_entries", "dimm_write_ns",
        "dimm_switch_ns", "writer_ns", "media_write_ns", "media_read_ns"]
INTS = {"wpq_entries", "write_buffers"}


def defaults():
    here = os.path.dirname(os.path.abspath(__file__))
    text = open(os.path.join(here, "..", "sim", "optane.toml"), "rb").read()
    if tomllib is None:
        sys.exit("fit-timing: needs Python 3.11 (tomllib) to read sim/optane.toml")
    return tomllib.loads(text.decode())["timing"]


def cost_of(pmsim, consts):
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write("[timing]\n")
        for k, v in consts.items():
            f.write(f"{k} = {int(round(v)) if k in INTS else float(v)!r}\n")
        path = f.name
    try:
        errs = []
        for size in (["--quick"], []):
            out = subprocess.run([pmsim, "calibrate", "--json", "--config", path] + size,
                                 capture_output=True, text=True)
            if out.returncode != 0:
                return float("inf")
            rows = json.loads(out.stdout)
            errs += [r["error"] for r in rows if r["fitted"] and r["point"].startswith("family=bandwidth")]
        return sum(e * e for e in errs) + 30 * sum(max(0.0, e - 0.09) ** 2 for e in errs)
    finally:
        os.unlink(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pmsim", default="target/release/pmsim")
    ap.add_argument("--keep", action="append", default=[], metavar="NAME=VALUE")
    a = ap.parse_args()
    start = defaults()
    kept = {}
    for kv in a.keep:
        k, v = kv.split("=", 1)
        kept[k] = float(v)
    free = {k: float(start[k]) for k in FREE if k not in kept}
    best, bc = dict(free), cost_of(a.pmsim, {**free, **kept})
    step = 0.25
    while step > 0.02:
        improved = False
        for k in list(best):
            for up in (True, False):
                q = dict(best)
                if k in INTS:
                    q[k] = max(1, best[k] + (max(1, round(best[k] * step)) if up else -max(1, round(best[k] * step))))
                elif best[k] == 0:
                    q[k] = step * 10 if up else 0.0
                else:
                    q[k] = best[k] * (1 + step) if up else best[k] / (1 + step)
                c = cost_of(a.pmsim, {**q, **kept})
                if c < bc:
                    best, bc, improved = q, c, True
        if not improved:
            step /= 2
        print(f"cost {bc:.4f} step {step:.3f}", file=sys.stderr, flush=True)
    print("[timing]")
    for k, v in {**best, **kept}.items():
        print(f"{k} = {int(round(v)) if k in INTS else round(v, 3)}")


if __name__ == "__main__":
    main()
