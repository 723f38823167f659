#!/usr/bin/env python3
"""Sums up a decode step traced by the timing probe (kernels/cuda/tern_trace.cuh).

  scripts/trace_step.py TRACE_FILE [--repo .] [--seq]

TRACE_FILE: what a -DTERN_TRACE=1 build of ternlab wrote under
TERNLAB_TRACE=FILE (one or more steps, "# step tokens=N records=R" then
"file line grid cta sm t0 t1 kind" per record).  For each step: the launches in
stream order (records sorted by the time after the wait; a launch is a run of
one call site, at most its grid's CTAs), each kernel's share of the critical
path (its wait's release to the next launch's), and the shares summed by
kernel.  --seq also prints every launch.  Kernel names come from the
sources as they are now (file hash and line): trace with the same checkout.
Development tool; plain Python."""
import argparse
import glob
import os
import re
import signal
import sys


def fnv(s):
    h = 2166136261
    for b in s.encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def kernel_names(repo):
    """(file hash, line) -> the __global__ function the line is in"""
    files, names = {}, {}
    for path in glob.glob(os.path.join(repo, "kernels/cuda/*.cu*")) + glob.glob(os.path.join(repo, "src/runtime/*.cu")):
        rel = os.path.relpath(path, repo)
        for cand in (rel, "./" + rel, os.path.abspath(path)):
            files[fnv(cand)] = rel
    for h, rel in list(files.items()):
        if rel in names:
            continue
        cur, table, pend = "?", {}, None
        with open(os.path.join(repo, rel)) as f:
            for i, line in enumerate(f, 1):
                if "__global__" in line:
                    pend = line.split("__global__", 1)[1]
                elif pend is not None:
                    pend += " " + line
                if pend is not None:  # the name: the first word before "(" past the attributes
                    m = re.search(r"(\w+)\s*\(", re.sub(r"__(launch_bounds|cluster_dims)__\s*\((?:[^()]|\([^()]*\))*\)", "", pend))
                    if m:
                        cur, pend = m.group(1), None
                table[i] = cur
        names[rel] = table
    return files, names


def launches(recs):
    """the wait records (pad 0) in launches; the marks (pad 1: t0 a point
    after the wait, t1 the CTA's end, TERN_TRACE_NOW / _END) go to the launch
    running at their end (a launch's CTAs all end before the next's release)"""
    marks = sorted((r for r in recs if r[7] == 1), key=lambda r: r[6])
    recs = sorted((r for r in recs if r[7] == 0), key=lambda r: r[6])
    out = []
    for r in recs:
        key = (r[0], r[1], r[2])
        if out and out[-1]["key"] == key and out[-1]["n"] < r[2]:
            L = out[-1]
        else:
            L = {"key": key, "n": 0, "rel": r[6], "t0": r[5], "last": r[6]}
            out.append(L)
        L["n"] += 1
        L["t0"] = min(L["t0"], r[5])
        L["last"] = max(L["last"], r[6])
        L.setdefault("ctas", {})[r[3]] = r
    k = 0
    for m in marks:
        while k + 1 < len(out) and out[k + 1]["rel"] <= m[6]:
            k += 1
        if out and out[k]["rel"] <= m[6]:
            out[k].setdefault("marks", []).append(m)
    return out


def med(v):
    v = sorted(v)
    return v[len(v) // 2] if v else float("nan")


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quietly, into head
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--repo", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--seq", action="store_true")
    a = ap.parse_args()
    files, names = kernel_names(a.repo)

    def name(key):
        rel = files.get(key[0])
        if rel is None:
            return "%08x:%d" % (key[0], key[1])
        return "%s:%d %s" % (os.path.basename(rel), key[1], names[rel].get(key[1], "?"))

    steps, cur = [], None
    try:
        with open(a.trace) as f:
            for n, line in enumerate(f, 1):
                if line.startswith("#"):
                    cur = {"head": line[1:].strip(), "recs": []}
                    steps.append(cur)
                elif cur is not None and line.strip():
                    try:
                        v = [int(x) for x in line.split()]
                    except ValueError:
                        v = []
                    if len(v) not in (7, 8):
                        sys.exit("trace_step: %s:%d: expected 'file line grid cta sm t0 t1 [kind]'" % (a.trace, n))
                    cur["recs"].append(tuple(v + [0] * (8 - len(v))))
    except OSError as e:
        sys.exit("trace_step: cannot read %s: %s" % (a.trace, e.strerror))
    if not steps:
        sys.exit("trace_step: no steps in %s" % a.trace)
    for st in steps:
        L = launches(st["recs"])
        if not L:
            continue
        span = L[-1]["rel"] - L[0]["rel"]
        print("== %s: %d launches, %.1f us from the first release to the last" % (st["head"], len(L), span / 1e3))
        tot = {}
        for i, x in enumerate(L):
            share = (L[i + 1]["rel"] - x["rel"]) if i + 1 < len(L) else 0
            early = x["rel"] - x["t0"]  # how long its first CTA was resident before the release
            k = name(x["key"])
            s = tot.setdefault(k, [0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0])
            s[0] += 1
            s[1] += share
            s[2] += early
            s[3] += x["n"] / x["key"][2]
            # with marks: wait -> mark point, mark point -> CTA end (medians over CTAs),
            # last CTA end -> next release (the grid's completion as the next kernel sees it)
            ms = [m for m in x.get("marks", []) if m[3] in x["ctas"]]
            if ms and i + 1 < len(L):
                pre = med([m[5] - x["ctas"][m[3]][6] for m in ms])
                body = med([m[6] - m[5] for m in ms])
                tail = L[i + 1]["rel"] - max(m[6] for m in ms)
                s[4] += pre
                s[5] += body
                s[6] += tail
                s[7] += 1
            if a.seq:
                extra = ""
                if ms and i + 1 < len(L):
                    extra = "  [wait->mid %5.2f mid->end %5.2f last end->next %5.2f]" % (pre / 1e3, body / 1e3, tail / 1e3)
                print("  %4d %-44s grid %5d ctas %5d  share %7.2f us  early %6.2f us  spread %6.2f us%s" %
                      (i, k, x["key"][2], x["n"], share / 1e3, early / 1e3, (x["last"] - x["rel"]) / 1e3, extra))
        print("  %-44s %6s %10s %9s %9s %6s  %s" % ("kernel (call site)", "calls", "share us", "per call", "early",
                                                   "ctas", "wait->mid mid->end end->next (marked kernels)"))
        for k, s in sorted(tot.items(), key=lambda kv: -kv[1][1]):
            extra = ""
            if s[7]:
                extra = "  %9.2f %7.2f %8.2f" % (s[4] / 1e3 / s[7], s[5] / 1e3 / s[7], s[6] / 1e3 / s[7])
            print("  %-44s %6d %10.1f %9.2f %9.2f %5.0f%%%s" %
                  (k, s[0], s[1] / 1e3, s[1] / 1e3 / s[0], s[2] / 1e3 / s[0], 100 * s[3] / s[0], extra))


if __name__ == "__main__":
    main()
