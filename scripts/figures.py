#!/usr/bin/python3
"""Draws the paper's figures from the HDF5 run files (make figures).

usage: /usr/bin/python3 scripts/figures.py [--results results] [--out paper/figures]
                                           [--configs configs] [EXP ...]

For every experiment that varies a quantisation or KV setting:
  <out>/<exp>.png  PPL (solid, with the dense reference PPL of the same points
                   dashed: the checkpoint's weights dense, i.e. BF16 weights in
                   f32, or a native ternary model's ternary values dequantised)
                   and mean KL to the reference, against the factor's values,
                   one colour per model.
For exp-throughput:
  <out>/exp-throughput.png  prefill and decode tokens/s against batch size,
                   one line per model x weights x device, the weights labelled
                   by what ran (the run's /load_report/run_as and /throughput
                   dtype: the config value `bf16` runs dense f32 on the CPU,
                   bf16 on CUDA), not by the config value.
Numbers are plotted as the C programs wrote them (/metrics, /throughput)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ternlab_runs as tr  # noqa: E402

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
except ImportError:
    sys.exit("figures need matplotlib: run with /usr/bin/python3 (Debian python3-matplotlib)")

NAN = float("nan")


def quality_figure(exp, runs, out):
    values = tr.values_in_order(runs)
    # one series per model, or per model and device where several devices'
    # runs share the folder (<model>__<value>__<device>.h5)
    devices = len(tr.uniq(runs, "device")) > 1

    def series(r):
        return f"{r['model_name']} ({r['attrs'].get('device', '?')})" if devices else r["model_name"]

    models = []
    for r in runs:
        if series(r) not in models:
            models.append(series(r))
    factor = runs[0]["attrs"].get("factor", "value")
    x = list(range(len(values)))
    fig, (ax_ppl, ax_kl) = plt.subplots(1, 2, figsize=(10, 3.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    all_kl = []
    for mi, model in enumerate(models):
        c = colors[mi % len(colors)]
        by_value = {r["value"]: r["metrics"] for r in runs if series(r) == model}
        ppl = [by_value.get(v, {}).get("ppl", NAN) for v in values]
        ref = [by_value.get(v, {}).get("ppl_ref", NAN) for v in values]
        kl = [by_value.get(v, {}).get("kl_mean", NAN) for v in values]
        all_kl += [k for k in kl if k == k]
        ax_ppl.plot(x, ppl, "o-", color=c, label=f"{model}")
        # (a marker: a point whose neighbours are missing has no line to show it)
        ax_ppl.plot(x, ref, "x--", color=c, alpha=0.7, markersize=4, label=f"{model} dense reference")
        ax_kl.plot(x, kl, "o-", color=c, label=model)
    ax_ppl.set_yscale("log")
    # (a range inside one decade, e.g. 38 .. 420, had a single tick label: label 1-2-3-5 steps)
    ax_ppl.yaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 3.0, 5.0)))
    ax_ppl.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax_ppl.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax_ppl.set_ylabel("perplexity (log scale)")
    ax_kl.set_ylabel("mean KL(reference || run), nats/token")
    if all_kl and min(all_kl) > 0:
        ax_kl.set_yscale("log")
    for ax in (ax_ppl, ax_kl):
        ax.set_xticks(x)
        ax.set_xticklabels(values, rotation=20)
        ax.set_xlabel(factor)
        ax.grid(True, alpha=0.3)
    ax_ppl.legend(fontsize=7)
    ax_kl.legend(fontsize=7)
    fig.suptitle(f"{exp}: {tr.TITLES.get(exp, factor)}\n{setup_line(runs)}", fontsize=10)
    fig.tight_layout()
    tr.savefig_atomic(fig, out, dpi=150)
    plt.close(fig)


def setup_line(runs):
    """What the runs measured over, from their attributes (window, windows,
    protocol, token file): the figure's second title line."""
    def key(s):  # numbers as numbers (window 32 before 128)
        return (0, float(s), s) if s.replace(".", "", 1).isdigit() else (1, 0.0, s)

    window, windows, protocol, tokens = (sorted(tr.uniq(runs, k), key=key)
                                         for k in ("window", "windows", "protocol", "tokens"))
    parts = []
    if window:
        parts.append(f"window {'/'.join(window)} tokens" + (f" x {'/'.join(windows)} windows" if windows else ""))
    if protocol:
        parts.append(f"protocol {'/'.join(protocol)}")
    if tokens:
        parts.append("/".join(os.path.basename(t) for t in tokens))
    return ", ".join(parts)


def throughput_figure(exp, runs, out):
    fig, (ax_p, ax_d) = plt.subplots(1, 2, figsize=(10, 3.8))
    for r in runs:
        t = r["throughput"]
        if not t.get("batch"):
            print(f"warning: {r['path']}: no batch in /throughput: not in the figure", file=sys.stderr)
            continue
        label = f"{r['model_name']} {tr.weights_label(r)} ({r['attrs'].get('device', '?')})"
        ax_p.plot(t["batch"], t.get("prefill_tok_s", [NAN] * len(t["batch"])), "o-", label=label)
        ax_d.plot(t["batch"], t.get("decode_tok_s", [NAN] * len(t["batch"])), "o-", label=label)
    batches = sorted({b for r in runs for b in r["throughput"].get("batch", [])})
    for ax, what in ((ax_p, "prefill"), (ax_d, "decode")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(batches)
        ax.set_xticklabels([str(b) for b in batches])
        ax.set_yscale("log")
        ax.set_xlabel("batch (sequences)")
        ax.set_ylabel(f"{what} tokens/s")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{exp}: {tr.TITLES.get(exp, '')}")
    fig.tight_layout()
    tr.savefig_atomic(fig, out, dpi=150)
    plt.close(fig)


def draw(exp, runs, out_dir, missing=()):
    out = os.path.join(out_dir, exp + ".png")
    if tr.is_throughput(runs):
        throughput_figure(exp, runs, out)
    else:
        quality_figure(exp, runs, out)
    print(f"figures: {out} ({len(runs)} runs)")


def main():
    return tr.run_per_experiment("figures", __doc__, "paper/figures", draw)


if __name__ == "__main__":
    sys.exit(main())
