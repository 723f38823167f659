#!/usr/bin/python3
"""Writes the paper's tables from the HDF5 run files (make tables).

usage: /usr/bin/python3 scripts/tables.py [--results results] [--out paper/tables]
                                          [--configs configs] [EXP ...]

<out>/<exp>.md and <out>/<exp>.tex for every experiment found:
  quality experiments: per model and factor value, PPL, the dense reference PPL,
    mean KL, top-1 agreement, logit relative L2 (and KV bytes per token for
    exp-kv-ternary), all from /metrics and /kv as the run wrote them;
  exp-throughput: per model, weights (as run: /load_report/run_as and
    /throughput dtype, e.g. the config value `bf16` is "dense f32" on
    the CPU, "dense bf16" on CUDA), device and batch size, prefill and
    decode tokens/s and decode-step latency p50/p99 from /throughput.
Values are printed, never recomputed (no ratios or differences)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ternlab_runs as tr  # noqa: E402


def fmt(v, spec):
    if v is None or (isinstance(v, float) and v != v):
        return "–"
    return format(v, spec)


def quality_rows(exp, runs):
    factor = runs[0]["attrs"].get("factor", "value")
    # a device column where runs of several devices share the folder (their
    # files are <model>__<value>__<device>.h5 beside the CPU ones)
    devices = len(tr.uniq(runs, "device")) > 1
    header = ["model", factor] + (["device"] if devices else []) + \
        ["PPL", "PPL (dense ref.)", "KL (nats/tok)", "top-1 agree", "logit rel. L2"]
    kv = exp == "exp-kv-ternary" or any("bytes_per_token" in r["kv"] and r["kv"].get("policy",
                                        "none") != "none" for r in runs)
    if kv:
        header.append("KV bytes/token")
    rows = []
    for r in runs:
        m = r["metrics"]
        row = [r["model_name"], r["value"]] + ([str(r["attrs"].get("device", "?"))] if devices else []) + \
              [fmt(m.get("ppl"), ".3f"), fmt(m.get("ppl_ref"), ".3f"),
               fmt(m.get("kl_mean"), ".4g"), fmt(m.get("top1_agree"), ".4f"),
               fmt(m.get("logit_rel_l2"), ".4g")]
        if kv:
            row.append(fmt(r["kv"].get("bytes_per_token"), ".1f"))
        rows.append(row)
    return header, rows


def throughput_rows(runs):
    header = ["model", "weights (as run)", "device", "batch", "prefill tok/s", "decode tok/s",
              "latency p50 (ms)", "latency p99 (ms)"]
    rows = []
    for r in runs:
        t = r["throughput"]
        if not t.get("batch"):
            print(f"warning: {r['path']}: no batch in /throughput: no row", file=sys.stderr)
        for i, b in enumerate(t.get("batch", [])):
            def col(k, spec):
                v = t.get(k, [])
                return fmt(v[i] if i < len(v) else None, spec)
            rows.append([r["model_name"], tr.weights_label(r), str(r["attrs"].get("device", "?")), str(b),
                         col("prefill_tok_s", ".1f"), col("decode_tok_s", ".1f"),
                         col("latency_ms_p50", ".2f"), col("latency_ms_p99", ".2f")])
    return header, rows


def markdown(header, rows):
    def number(c):
        try:
            float(c)
            return True
        except ValueError:
            return c == "–"
    right = [bool(rows) and all(number(r[i]) for r in rows) for i in range(len(header))]
    out = ["| " + " | ".join(header) + " |",
           "| " + " | ".join("---:" if r else "---" for r in right) + " |"]
    out += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(out) + "\n"


LATEX_SPECIAL = {"\\": r"\textbackslash{}", "_": r"\_", "%": r"\%", "&": r"\&", "#": r"\#",
                 "{": r"\{", "}": r"\}", "$": r"\$", "^": r"\textasciicircum{}",
                 "~": r"\textasciitilde{}", "–": "--",
                 # OT1, LaTeX's default font encoding, prints these as other glyphs
                 "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}"}


def latex_escape(s):
    """Every LaTeX special character of s escaped, in one pass (a sequence of
    replaces had escaped the braces of \\textbackslash{} again)."""
    return "".join(LATEX_SPECIAL.get(c, c) for c in s)


def latex(header, rows, caption, label):
    cols = "ll" + "r" * (len(header) - 2)
    out = [r"\begin{table}[t]", r"\centering", r"\small", rf"\begin{{tabular}}{{{cols}}}",
           r"\toprule", " & ".join(latex_escape(h) for h in header) + r" \\", r"\midrule"]
    prev = None
    for row in rows:
        if prev is not None and row[0] != prev:
            out.append(r"\midrule")
        prev = row[0]
        out.append(" & ".join(latex_escape(c) for c in row) + r" \\")
    out += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{latex_escape(caption)}}}",
            rf"\label{{tab:{label}}}", r"\end{table}"]
    return "\n".join(out) + "\n"


def write(exp, runs, out_dir, missing=()):
    if tr.is_throughput(runs):
        header, rows = throughput_rows(runs)
    else:
        header, rows = quality_rows(exp, runs)
    gap = "; ".join(f"{m}: {', '.join(v)}" for m, v in missing)
    caption = f"{exp}: {tr.TITLES.get(exp, '')} ({len(runs)} runs" + \
        (f"; no run file for {gap})" if gap else ")")
    md = markdown(header, rows) + (f"\n*No run file for {gap}.*\n" if gap else "")
    tr.write_atomic(os.path.join(out_dir, exp + ".md"), md)
    tr.write_atomic(os.path.join(out_dir, exp + ".tex"), latex(header, rows, caption, exp))
    print(f"tables: {out_dir}/{exp}.md, .tex ({len(rows)} rows)")


def main():
    return tr.run_per_experiment("tables", __doc__, "paper/tables", write)


if __name__ == "__main__":
    sys.exit(main())
