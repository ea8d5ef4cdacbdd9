"""Round 20: where web-like TCP's tracking error comes from.

python3 docs/results/r20/web_bias.py docs/results/r20/web*  (one line per run directory)

Per run (estimates after the first 5 s): the truth's and the estimates' means (Mbit/s), the
signed median error, the readings and hold-check streams sent, the share of readings at or
below 0 and at C, and the probe load.
"""
import collections
import json
import statistics as st
import sys

print("| run | estimates | truth mean | estimate mean | signed median | median / p90 abs | readings | at ≤ 0 | at ≥ C | checks | load |")
print("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|")
for d in sys.argv[1:]:
    r = json.load(open(f"{d.rstrip('/')}/tracking.json"))["rows"][0]
    rec = [x for x in r["record"] if x["t_s"] > 5]
    v = [x["value_bps"] / 1e6 for x in rec]
    t = [x["truth_bps"] / 1e6 for x in rec]
    signed = [(a - b) / b for a, b in zip(v, t)]
    kinds = collections.Counter(x["kind"] for x in r["streams"])
    c = r["capacity_mbit"]
    reads = [x["held_bps"] / 1e6 for x in r["streams"] if x["kind"] == "reading" and x["held_bps"] is not None]
    low = sum(1 for a in reads if a <= 0.0)
    high = sum(1 for a in reads if a >= 0.998 * c)
    print(
        f"| {d.rstrip('/').split('/')[-1]} | {len(rec)} | {st.mean(t):.2f} | {st.mean(v):.2f} | "
        f"{100 * st.median(signed):+.1f}% | {100 * r['median_err']:.1f}% / {100 * r['p90_err']:.1f}% | "
        f"{kinds.get('reading', 0)} | {low} | {high} | {kinds.get('above', 0) + kinds.get('below', 0)} | "
        f"{100 * r['load_share']:.2f}% |"
    )
