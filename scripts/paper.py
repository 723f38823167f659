#!/usr/bin/python3
"""Regenerates paper/paper.md from the run files, the tables and the figures
(make paper runs figures.py and tables.py first).

usage: /usr/bin/python3 scripts/paper.py [--results results] [--paper paper]
                                         [--configs configs]

The setup section (models and their hashes, token file, window, protocol,
machine, versions) is taken from the runs' HDF5 root attributes; the result
sections include paper/tables/<exp>.md and link paper/figures/<exp>.png.
An experiment with no run files under --results keeps the table and figure
already in paper/ (said so in its section) rather than losing its section.
Nothing is computed here: the text states what the files say."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ternlab_runs as tr  # noqa: E402

INTRO = {
    "exp-threshold": "Post-training ternarisation of each linear layer's weights with "
                     "different threshold/scale rules (BitNet b1.58 absmean, TWN, a "
                     "standard-deviation threshold, the exact L2-optimal threshold per "
                     "group, TQ2_0-style absmax) at group 128 with f16 scales. On a checkpoint "
                     "whose weights are already ternary (BitNet b1.58) every rule but absmean "
                     "finds its codes again (scales rounded to f16 aside), so those rows repeat "
                     "the reference; absmean rescales each group by its share of non-zero "
                     "weights. Runs with int8 activations (BitNet's) move by up to ~0.2 % in "
                     "perplexity when a last-bit difference flips one activation code: smaller "
                     "differences between their rows are not resolved.",
    "exp-scale-dtype": "The same ternary codes with the per-group scales stored (and rounded) "
                       "as f32, bf16, f16, fp8 e4m3 or e8m0 (power of two); absmean rule, "
                       "group 128.",
    "exp-group-size": "One scale per tensor, per output row, or per 256/128/64/32 inputs of a "
                      "row; absmean rule, f16 scales.",
    "exp-kv-ternary": "Keys and values stored as ternary pages for the prompt ('encoder'), "
                      "for generated tokens ('decoder'), for both ('all'), or not at all; "
                      "weights as loaded. Each window's first half is prefilled and its second "
                      "half decoded token by token and scored, for the reference as well. "
                      "The decoded tokens are the text's own (teacher forced), not the model's; "
                      "under 'encoder' and 'all' the prefill's attention already reads the "
                      "prompt's ternary keys and values (stricter than engines that attend in "
                      "full precision during prefill and store ternary afterwards).",
    "exp-throughput": "Prefill and decode throughput of the checkpoint's weights run dense "
                      "against packed ternary weights for several batch sizes (what each "
                      "config value ran as is taken from the runs' load reports below).",
}


def sweep_count(all_runs):
    """How many runs record a sweep point (made by scripts/sweep.sh)."""
    return sum(1 for r in all_runs if r["attrs"].get("sweep_point") is not None)


def setup_section(all_runs):
    made = tr.uniq(all_runs, 'created_utc')  # (runs without it had made min() of [] a traceback)
    lines = ["## Setup", ""]
    if not all_runs:
        return lines + ["No run files yet: run `make exp-threshold` (and the other "
                        "experiments), then `make paper`.", ""]
    swept = sweep_count(all_runs)
    models = {}
    for r in all_runs:
        a = r["attrs"]
        models.setdefault(str(a.get("model", "?")), set()).add(str(a.get("model_sha256", "?")))
    lines.append("**Models.**")
    for m, shas in sorted(models.items()):
        lines.append(f"- `{m}` (sha256 {', '.join(sorted(s[:16] for s in shas))}…)")
    lines += ["",
              f"**Data.** Token file(s): {', '.join(f'`{t}`' for t in tr.uniq(all_runs, 'tokens'))}; "
              f"window {', '.join(tr.uniq(all_runs, 'window'))} tokens"
              + (f"; windows per run: {', '.join(tr.uniq(all_runs, 'windows'))}"
                 if tr.uniq(all_runs, "windows") else "") + ".",
              "",
              "**Protocol.** Perplexity over non-overlapping windows (GPTQ style): window *w* is "
              "tokens [*wT*, (*w*+1)*T*), positions 0..*T*−2 predict 1..*T*−1, no BOS is "
              "inserted and a partial tail is dropped; PPL = exp(mean NLL). Every run computes "
              "(or reuses, keyed by model, tokens, window, protocol, program build and BLAS "
              "kernels) a reference with the same "
              "forward pass, the checkpoint's weights dense (BitNet b1.58: its ternary values "
              "dequantised, with its int8 activations) with fp32 accumulation and a full-precision "
              "KV cache, over the same windows; KL, top-1 agreement and logit relative L2 compare "
              "each scored position's logits with the reference's. Definitions: "
              "`paper/SCHEMA.md`.",
              "",
              f"**Machine.** Host(s): {', '.join(tr.uniq(all_runs, 'host'))}; device(s): "
              f"{', '.join(tr.uniq(all_runs, 'device'))}; tensor parallel ranks: "
              f"{', '.join(tr.uniq(all_runs, 'tp'))}"
              + (f"; CPU(s): {', '.join(tr.uniq(all_runs, 'cpu'))}" if tr.uniq(all_runs, "cpu") else "")
              + (f"; CPU threads: {', '.join(tr.uniq(all_runs, 'threads'))}" if tr.uniq(all_runs, "threads") else "")
              + (f"; OpenBLAS kernels: {', '.join(tr.uniq(all_runs, 'blas_core'))} (dense results, "
                 "hence the dense reference, round differently from one kernel set to another)"
                 if tr.uniq(all_runs, "blas_core") else "") + ".",
              "",
              f"**Software.** ternlab {', '.join(tr.uniq(all_runs, 'ternlab_version'))}, commit(s) "
              f"{', '.join(f'`{c}`' for c in tr.uniq(all_runs, 'git_commit'))}"
              + (f"; runs made {min(made)} to {max(made)} (UTC)." if made else
                 "; the runs record no date (created_utc).")
              + (" Sweeps ran under scripts/sweep.sh (GNU Parallel [1], or a Slurm array)." if swept else
                           " The runs were made one by one (none records a sweep point).")
              + (f" {swept} of {len(all_runs)} runs made by sweeps." if 0 < swept < len(all_runs) else ""),
              ""]
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", default=None, help="results folder (default results/)")
    ap.add_argument("--paper", default="paper")
    ap.add_argument("--configs", default="configs")
    a = ap.parse_args()
    given, a.results = a.results is not None, a.results or "results"
    # (required: without runs there is nothing to regenerate the paper from)
    err = tr.check_results_arg("paper.py", a.results, [], a.configs, given, required=True)
    if err:
        return err
    exps = tr.experiments(a.results)
    per_exp = {e: tr.load(a.results, e, a.configs) for e in exps}
    all_runs = [r for e in exps for r in per_exp[e]]
    if not all_runs:  # (the setup section would lose its provenance to "no run files yet")
        print(f"paper.py: no complete run files under {a.results}/exp-*: {a.paper}/paper.md left as it is",
              file=sys.stderr)
        return 1

    lines = ["# Ternary weights and ternary KV caches in small language models", "",
             "<!-- Generated by scripts/paper.py from the HDF5 run files in "
             f"{a.results}/ (make paper). Do not edit: edit scripts/paper.py. -->", "",
             "Each experiment varies one factor of ternary inference and measures, against a "
             "dense reference of the same model (its own weights dense: a BF16 checkpoint's "
             "in f32, a natively ternary checkpoint's ternary values dequantised), "
             "perplexity, the KL divergence of the "
             "next-token distributions and related logit statistics; one experiment measures "
             "throughput. Every number below was written by the C programs into one HDF5 "
             "file per run (`paper/SCHEMA.md`); the tables and figures are regenerated "
             "from those files.", ""]
    lines += setup_section(all_runs)
    lines += ["## Results", ""]
    shown = tr.EXPERIMENTS + [e for e in exps if e not in tr.EXPERIMENTS]
    for exp in shown:
        runs = per_exp.get(exp, [])
        lines += [f"### {tr.TITLES.get(exp, exp)} (`{exp}`)", ""]
        if exp in INTRO:
            lines += [INTRO[exp], ""]
        table = os.path.join(a.paper, "tables", exp + ".md")
        if not runs and not os.path.exists(table):
            lines += [f"*No results yet: `make {exp}`.*", ""]
            continue
        if not runs:  # (a partial results/: the committed table and figure stay)
            lines += [f"*No run files under `{a.results}/{exp}`: the table and figure below are "
                      f"those already in `{a.paper}/`, not regenerated (the setup above does not "
                      f"cover them); `make {exp}` reruns it.*", ""]
        else:
            models = tr.models_in_order(runs)
            lines += [f"{len(runs)} runs on {', '.join(models)}; factor `"
                      f"{runs[0]['attrs'].get('factor', '?')}` = "
                      f"{', '.join(f'`{v}`' for v in tr.values_in_order(runs))}.", ""]
            if tr.is_throughput(runs):
                ran = []
                for r in runs:
                    d = f"`{r['value']}`: {tr.weights_label(r)} on {r['attrs'].get('device', '?')}"
                    if d not in ran:
                        ran.append(d)
                lines += ["Weights as run (each run's `/load_report/run_as`): " + "; ".join(ran) + ".", ""]
        if os.path.exists(table):
            with open(table, encoding="utf-8") as f:
                lines += [f"Table: {exp} (`tables/{exp}.md`, LaTeX `tables/{exp}.tex`).", "",
                          f.read().rstrip("\n"), ""]
        else:
            lines += [f"*Table missing: run `make tables`.*", ""]
        fig = os.path.join(a.paper, "figures", exp + ".png")
        if os.path.exists(fig):
            lines += [f"![{exp}](figures/{exp}.png)", ""]
        else:
            lines += [f"*Figure missing: run `make figures`.*", ""]
    swept = sweep_count(all_runs)  # (the sweep sentence cites [1])
    lines += ["## Reproducing", "",
              "```", "make exp-threshold exp-scale-dtype exp-group-size exp-kv-ternary "
              "exp-throughput   # or scripts/sweep.sh EXP --jobs N",
              "make paper                  # figures, tables and this file", "```", "",
              ] + (["## References", "",
                    "[1] O. Tange, *GNU Parallel 20221122 ('Херсо́н')*, Zenodo, 2022. "
                    "doi:10.5281/zenodo.7347980.", ""] if swept else [])
    out = os.path.join(a.paper, "paper.md")
    try:  # (a --paper that is a file, a read-only folder: said, not a traceback)
        os.makedirs(a.paper, exist_ok=True)
        tr.write_atomic(out, "\n".join(lines))
    except OSError as e:
        print(f"paper.py: {e}", file=sys.stderr)
        return 1
    print(f"paper: {out} ({len(all_runs)} runs, {len(exps)} experiments)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
