"""The error floor of a value that knows only the long-run mean, for the tracking bench's
on/off cross traffic (exponential 0.5 s on and off times, bursts at 60% of C): A over the
second before an estimate is C - 0.6 C x (the share of that second that was on).
Run: python3 docs/results/tracking_onoff_floor.py  (prints the median and p90 error)."""
import bisect
import random
import statistics

random.seed(1)
T, t, on, segs = 20000.0, 0.0, random.random() < 0.5, []
while t < T:
    d = random.expovariate(2.0)  # mean 0.5 s
    segs.append((t, t + d, on))
    t, on = t + d, not on
starts = [s[0] for s in segs]


def on_share(a, b):
    i, tot = bisect.bisect_right(starts, a) - 1, 0.0
    while i < len(segs) and segs[i][0] < b:
        s, e, o = segs[i]
        if o:
            tot += max(0.0, min(e, b) - max(s, a))
        i += 1
    return tot / (b - a)


shares = [on_share(x, x + 1) for x in (random.uniform(0, T - 2) for _ in range(20000))]
avail = [1 - 0.6 * f for f in shares]  # A over one second, as a share of C
for label, value in [("long-run mean 0.70 C", 0.70)] + [
    ("best constant", min((0.6 + 0.01 * i for i in range(25)),
                          key=lambda c: statistics.median(abs(c - a) / a for a in avail)))
]:
    e = sorted(abs(value - a) / a for a in avail)
    print(f"{label} ({value:.2f} C): median {e[len(e) // 2]:.1%}, p90 {e[int(len(e) * 0.9)]:.1%}")
