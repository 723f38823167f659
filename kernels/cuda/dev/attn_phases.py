#!/usr/bin/env python3
"""Thread 0's times in the fused decode attention (dev/attn_phase_trace.patch).

  patch -p1 < kernels/cuda/dev/attn_phase_trace.patch && make trace
  TERNLAB_TRACE=F build-trace/ternlab bench-e2e --shapes 7b --configs tern-i8 --kv all \\
      --batches 1 --prompt 1024 --prefill 16 --same-process
  python3 kernels/cuda/dev/attn_phases.py F

For the last traced step: per point, the median over CTAs (p10, p90) of the
microseconds from the CTA's wait's release to that point.  The points are
timer reads (not fenced against the memory operations around them: a load's
latency can show up at the point after it); points 2-7 are the key lanes'
(ternary pages), 11-12 the merging CTA's.  The 24 bytes of times a thread can push the forms held by
launch bounds into spills: the traced step is slower than the plain one.
Development tool; plain Python."""
import statistics
import sys
from collections import defaultdict

NAMES = {1: "rows roped (and coded)", 2: "chunk: page rows", 3: "chunk: pair table",
         4: "key scores (first keys)", 5: "value rows staged", 6: "values summed (first keys)",
         7: "chunks done", 8: "warps combined", 9: "split counted", 10: "end (merger / unsplit)",
         11: "merger: splits' weights", 12: "merger: weights shared"}


def main():
    steps = []
    for ln in open(sys.argv[1]):
        if ln.startswith("#"):
            steps.append([])
            continue
        a = ln.split()
        if len(a) >= 8 and steps:
            steps[-1].append([int(x) for x in a[:8]])
    if not steps:
        sys.exit("attn_phases: no traced step in %s" % sys.argv[1])
    pts = defaultdict(list)
    for _f, line, _g, _c, _sm, t0, t1, kind in steps[-1]:
        if kind == 2 and _f == 7 and 9000 < line < 9020:
            pts[line - 9000].append((t1 - t0) / 1000.0)
    for k in sorted(pts):
        v = sorted(pts[k])
        print("%2d %-26s n=%6d median %6.2f p10 %6.2f p90 %6.2f us" %
              (k, NAMES.get(k, "?"), len(v), statistics.median(v), v[len(v) // 10], v[9 * len(v) // 10]))


if __name__ == "__main__":
    main()
