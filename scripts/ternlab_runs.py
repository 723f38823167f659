"""Reading ternlab run files (HDF5, schema in paper/SCHEMA.md) for the figure,
table and paper scripts.  Only reads: every number comes from a file the C
programs wrote; nothing here recomputes a metric.

Needs h5py: run the scripts with Debian's /usr/bin/python3 (python3-h5py,
python3-matplotlib; scripts/deps.sh installs them)."""
import argparse
import glob
import os
import re
import shlex
import subprocess
import sys

try:
    import h5py
except ImportError:  # pragma: no cover - a clear message instead of a trace
    sys.exit("ternlab scripts need h5py: run them with /usr/bin/python3 "
             "(Debian python3-h5py; scripts/deps.sh installs it)")

# Experiments in the order the paper presents them; anything else found in
# the results folder follows, sorted.
EXPERIMENTS = ["exp-threshold", "exp-scale-dtype", "exp-group-size", "exp-kv-ternary",
               "exp-throughput"]
# What each experiment varies, for captions.
TITLES = {
    "exp-threshold": "Threshold and scale rule",
    "exp-scale-dtype": "Storage format of the scales",
    "exp-group-size": "Weights per scale (group size)",
    "exp-kv-ternary": "Ternary KV cache policy",
    "exp-throughput": "Throughput: dense vs ternary weights",
}
METRICS = ["ppl", "ppl_ref", "nll_mean", "kl_mean", "top1_agree", "logit_rel_l2"]


def text(v):
    """An HDF5 attribute or string value as str (h5py gives str for
    variable-length strings, bytes / numpy.bytes_ for fixed-width ones)."""
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if hasattr(v, "item"):
        v = v.item()
        if isinstance(v, bytes):
            return v.decode("utf-8", "replace")
    return str(v)


def scalar(v):
    if hasattr(v, "item"):
        v = v.item()
    return v


def conf_list(configs_dir, exp, key):
    """A list setting (values, models) in the order configs/<exp>.conf gives
    it ([] when there is no config).  Same comment rules as src/log/expconf.c."""
    path = os.path.join(configs_dir, exp + ".conf")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"\s*" + key + r"\s*=(.*)$", line)
            if m:
                return re.split(r"(?:^|\s)#", " " + m.group(1))[0].split()
    return []


def replace_atomic(path, write):
    """write(tmp) to a temporary beside path, then the temporary renamed onto
    path: a reader sees the old file or the whole new one (the temporary is
    removed where write fails)."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def write_atomic(path, text):
    """text into path (replace_atomic)."""
    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
    replace_atomic(path, write)


def savefig_atomic(fig, path, **kw):
    """fig.savefig into path (replace_atomic; PNG: the temporary's suffix is not .png)."""
    replace_atomic(path, lambda tmp: fig.savefig(tmp, format="png", **kw))


def conf_values(configs_dir, exp):
    return conf_list(configs_dir, exp, "values")


# Reads every attribute and dataset of the files named on stdin (one a line),
# printing each name once done: run in a child by crash_free.
_PROBE = r"""
import sys, h5py
def walk(g):
    for v in g.attrs.values():
        pass
    for k in g:
        o = g[k]
        if isinstance(o, h5py.Dataset):
            o[()]
            for v in o.attrs.values():
                pass
        else:
            walk(o)
for line in sys.stdin:
    p = line.rstrip("\n")
    try:
        with h5py.File(p, "r") as f:
            walk(f)
    except Exception:
        pass
    print(p, flush=True)
"""


# root attributes the readers take as text (paper/SCHEMA.md "Root attributes")
STR_ATTRS = ("experiment", "factor", "factor_value", "model", "tokens", "quant_spec", "kv_policy",
             "device", "created_utc", "host", "git_commit", "ternlab_version")


def crash_free(paths):
    """The paths whose reading does not crash the HDF5 library.  A damaged
    file can make libhdf5 itself segfault (a flipped byte in a global heap,
    read with the attributes): one such file had killed make tables, and no
    table of any experiment was written.  The files are read first in a child
    process; where it dies, the file it was reading is skipped with a warning
    and a new child goes on from the next one."""
    left, ok = list(paths), []
    while left:
        proc = subprocess.run([sys.executable, "-c", _PROBE], input="".join(p + "\n" for p in left),
                              capture_output=True, text=True, check=False)
        done = proc.stdout.splitlines()
        ok += done
        if proc.returncode == 0 or len(done) >= len(left):
            break
        bad = left[len(done)]
        why = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
        print(f"warning: skipping {bad}: damaged: reading it crashed the HDF5 library ({why})",
              file=sys.stderr)
        left = left[len(done) + 1:]
    return ok


def read_run(path):
    """One run file as a dict, or None (with a warning) when it cannot be
    read or is not complete -- scripts/sweep.sh reruns such files.  A file
    that opens but whose attributes or data cannot be read (a damaged heap)
    is skipped the same way: one bad file must not stop every table."""
    try:
        return _read_run(path)
    except (OSError, RuntimeError, KeyError, ValueError, TypeError) as e:
        # (h5py raises RuntimeError for some damaged structures: "bad local heap signature")
        print(f"warning: skipping {path}: cannot be read ({e})", file=sys.stderr)
        return None


def _read_run(path):
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        print(f"warning: skipping {path}: cannot open ({e})", file=sys.stderr)
        return None
    with f:
        attrs = {k: scalar(v) for k, v in f.attrs.items()}
        if int(attrs.get("complete", 0)) != 1:
            print(f"warning: skipping {path}: incomplete (no complete = 1)", file=sys.stderr)
            return None
        attrs = {k: (text(v) if isinstance(v, (str, bytes)) else v) for k, v in attrs.items()}
        # (a complete HDF5 file of another kind in the folder -- a reference cache copied
        # there -- had become a row "? | ?" and a missing point "?")
        for k in ("model", "factor_value"):
            if k not in attrs:
                print(f"warning: skipping {path}: not a run file (no root attribute {k})", file=sys.stderr)
                return None
        # the types the tables and figures rely on (paper/SCHEMA.md): a file of another form
        # had stopped every later experiment's table with a traceback
        for k in STR_ATTRS:
            if k in attrs and not isinstance(attrs[k], str):
                raise ValueError(f"root attribute {k} is {type(attrs[k]).__name__}, not a string")
        run = {"path": path, "attrs": attrs, "metrics": {}, "throughput": {}, "kv": {}}
        if "metrics" in f:
            for k in f["metrics"]:
                run["metrics"][k] = float(f["metrics"][k][()])
        if "throughput" in f:
            for k in f["throughput"]:
                v = f["throughput"][k][()]
                if getattr(v, "ndim", 0) != 1:
                    raise ValueError(f"/throughput/{k} is not a 1-D dataset")
                run["throughput"][k] = v.tolist()
            # the timed runs' precision (bf16: the CUDA engine's bf16 form)
            dd = f["throughput"].attrs.get("dtype")
            if dd is not None:
                run["throughput_dtype"] = text(dd)
        if "kv" in f:
            for k in f["kv"]:
                v = f["kv"][k][()]
                run["kv"][k] = text(v) if isinstance(v, (bytes, str)) else scalar(v)
                if (k == "policy") != isinstance(run["kv"][k], str):
                    raise ValueError(f"/kv/{k} is {type(run['kv'][k]).__name__}"
                                     + (", not a string" if k == "policy" else ", not a number"))
        if "weights" in f and "name" in f["weights"]:
            run["n_linears"] = len(f["weights"]["name"])
        if "load_report" in f and "run_as" in f["load_report"] and "name" in f["load_report"]:
            lr = f["load_report"]
            run["load_report"] = [
                {"name": text(n), "run_as": text(ra)}
                for n, ra in zip(lr["name"][()].tolist(), lr["run_as"][()].tolist())]
    run["model_name"] = os.path.basename(str(attrs.get("model", "?")).rstrip("/"))
    run["value"] = str(attrs.get("factor_value", "?"))
    return run


def load(results_dir, exp, configs_dir="configs"):
    """Every readable run of one experiment, sorted by model then by the
    config's order of values (load_with_missing's runs)."""
    return load_with_missing(results_dir, exp, configs_dir)[0]


def load_with_missing(results_dir, exp, configs_dir="configs"):
    """(runs, missing): load's runs, and missing_points against each model's
    grid followed by unrun_models against the last sweep's plan
    (RESULTS/EXP/jobs).  A file of another experiment (its `experiment`
    attribute) is skipped with a warning; a model that lacks some of its
    grid's values, or every planned one, is named with them on stderr."""
    runs = []
    for p in crash_free(sorted(glob.glob(os.path.join(glob.escape(results_dir), glob.escape(exp), "*.h5")))):
        r = read_run(p)
        if r is None:
            continue
        e = r["attrs"].get("experiment")
        if e is not None and str(e) != exp:
            print(f"warning: skipping {p}: a run of '{e}', not of {exp}", file=sys.stderr)
            continue
        runs.append(r)
    runs = drop_duplicates(runs, exp)
    warn_mixed_settings(runs, exp)
    values = conf_values(configs_dir, exp)
    jobs = os.path.join(results_dir, exp, "jobs")
    planned = planned_points(jobs)
    missing = []
    for m, gone, from_plan in missing_points(runs, values, planned):
        grid = f"the last sweep's plan, {jobs}" if from_plan else f"{configs_dir}/{exp}.conf's values"
        print(f"warning: {exp}: {m} has no run for {', '.join(gone)} (of {grid})", file=sys.stderr)
        missing.append((m, gone))
    unrun = unrun_models(runs, planned, values)
    for m, gone in unrun:
        print(f"warning: {exp}: {m} has no run file at all (the last sweep in {os.path.dirname(jobs)} "
              f"planned {', '.join(gone)})", file=sys.stderr)
    missing = missing + unrun
    # the config's order, then the values only a sweep's `values=` override planned, in its order
    rank = {v: i for i, v in enumerate(dict.fromkeys(values + [v for _, v, _ in planned]))}
    for r in runs:
        r["value_rank"] = rank.get(r["value"], len(rank))
    mrank = {os.path.basename(m.rstrip("/")): i
             for i, m in enumerate(conf_list(configs_dir, exp, "models"))}
    runs.sort(key=lambda r: (mrank.get(r["model_name"], len(mrank)), r["model_name"],
                             rank.get(r["value"], len(rank)), r["value"],
                             str(r["attrs"].get("device", ""))))
    return runs, missing


def drop_duplicates(runs, exp):
    """One run per (model, value, device): where several files hold the same
    point (a file copied or renamed by hand), the newest (created_utc, then
    the path) is kept and the others named on stderr -- a figure had kept one
    of them silently and a table had shown both."""
    def point(r):
        return r["model_name"], r["value"], str(r["attrs"].get("device", ""))

    newest = {}
    for r in runs:
        order = (str(r["attrs"].get("created_utc", "")), r["path"])
        if point(r) not in newest or order > newest[point(r)][0]:
            newest[point(r)] = (order, r)
    keep = {id(v[1]) for v in newest.values()}
    for r in runs:
        if id(r) not in keep:
            k = newest[point(r)][1]
            print(f"warning: {exp}: {r['path']} is the same point as {k['path']} ({r['model_name']}, "
                  f"{r['value']}): skipping the older", file=sys.stderr)
    return [r for r in runs if id(r) in keep]


def warn_mixed_settings(runs, exp):
    """A warning on stderr where the runs of one experiment were evaluated
    differently (window, number of windows, token file, its contents; the KV
    policy and tensor parallelism where the factor is not the KV policy; a
    model's weight spec past the factor's own key, where the factor does not
    choose the weights): their rows side by side in a table compare unlike
    things.  (A `quant=` override on one sweep of a model's values had put
    its re-ternarised row beside the others, unsaid.)"""
    factor = str(runs[0]["attrs"].get("factor", "")) if runs else ""

    def spec(s):  # the quant_spec with the factor's own key's value as {} (rule={}, group={})
        return re.sub(r"(^|,)" + re.escape(factor) + r"=[^,]*", r"\g<1>" + factor.replace("\\", r"\\") + "={}",
                      str(s))

    keys = [("window", str), ("windows", str), ("tokens", lambda t: os.path.basename(str(t))),
            ("tokens_sha256", lambda t: str(t)[:12]), ("tp", str)]
    if factor != "kv":
        keys.append(("kv_policy", str))
    checks = [(key, show, None) for key, show in keys]
    if factor != "weights":  # (exp-throughput's values are the weights: loaded, or ternarised)
        checks.append(("quant_spec", spec, lambda r: r["model_name"]))
    for key, show, per in checks:
        groups = {}
        for r in runs:
            if key in r["attrs"]:
                seen = groups.setdefault(per(r) if per else None, {})
                seen.setdefault(show(r["attrs"][key]), []).append(os.path.basename(r["path"]))
        for g, seen in groups.items():
            if len(seen) > 1:
                parts = "; ".join(f"{v}: {', '.join(files[:3])}{' ...' if len(files) > 3 else ''}"
                                  for v, files in seen.items())
                whose = f"{g}'s runs" if per else "the runs"
                print(f"warning: {exp}: {whose} differ in {key} ({parts}): they are not comparable "
                      f"side by side", file=sys.stderr)


def run_device(run):
    """The run's device without its index ("cuda:1" -> "cuda")."""
    return str(run["attrs"].get("device", "?")).split(":")[0]


def missing_points(runs, values, planned=()):
    """[(model, [values it has no run for], from_plan)] over the models that
    have runs; where runs of several devices share the folder
    (<model>__<value>__cuda.h5 beside the CPU files), per model and device:
    "model (device)".  A model's grid is what the last sweep planned for it
    on its runs' device (planned_points: under a `values=` override the grid
    the sweep was asked for, the config's other values not missing; from_plan
    True), else the config's values."""
    devices = len({run_device(r) for r in runs}) > 1
    out = []
    for m in sorted({(r["model_name"], run_device(r) if devices else "") for r in runs}):
        mine = [r for r in runs if (r["model_name"], run_device(r) if devices else "") == m]
        have, devs = {r["value"] for r in mine}, {run_device(r) for r in mine}
        # (a file without a device attribute, "?", takes the plan of any device)
        grid = [v for pm, v, pd in planned if pm == m[0] and (pd in devs or "?" in devs)]
        missing = [v for v in (grid or values) if v not in have]
        if missing:
            out.append((f"{m[0]} ({m[1]})" if devices else m[0], missing, bool(grid)))
    return out


_ANSI_C = {"a": 7, "b": 8, "e": 27, "E": 27, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "\\": 92,
           "'": 39, '"': 34, "?": 63}


_ANSI_C_WORD = re.compile(r"\$'((?:[^'\\]|\\.)*)'")


def _ansi_c_decode(m):
    """One $'...' word's text as a shlex-quoted word (bash's escapes: octal,
    \\xHH, the named ones; any other backslash kept as it is)."""
    body, out, i = m.group(1), bytearray(), 0
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body):
            n = body[i + 1]
            o = re.match(r"[0-7]{1,3}", body[i + 1:]) if n in "01234567" else None
            h = re.match(r"x([0-9a-fA-F]{1,2})", body[i + 1:]) if n == "x" else None
            if o:
                out.append(int(o.group(0), 8) & 0xFF)
                i += 1 + len(o.group(0))
                continue
            if h:
                out.append(int(h.group(1), 16))
                i += 1 + len(h.group(0))
                continue
            if n in _ANSI_C:
                out.append(_ANSI_C[n])
                i += 2
                continue
        out += body[i].encode("utf-8")
        i += 1
    return shlex.quote(out.decode("utf-8", "surrogateescape"))


def ansi_c_words(line):
    """line with bash's $'...' words (printf %q writes bytes outside ASCII so
    under the C locale, a cluster's usual one: $'mod\\303\\250le') as plain
    quoted words shlex reads -- shlex had failed on them and the model's plan
    was dropped -- up to the first word "--": what follows is the program's
    own command line (a template's sh -c 'x$'\\''y' is no such word), kept."""
    out, i, n, start = [], 0, len(line), True
    while i < n:
        c = line[i]
        if start and line.startswith("--", i) and (i + 2 == n or line[i + 2].isspace()):
            out.append(line[i:])
            break
        m = _ANSI_C_WORD.match(line, i)
        if m:
            out.append(_ansi_c_decode(m))
            i, start = m.end(), False
            continue
        if c == "\\":  # (an escaped character, a blank among them, is part of the word)
            out.append(line[i:i + 2])
            i, start = i + 2, False
            continue
        if c == "'" or c == '"':  # (a quoted part whole: no "--" or $' inside it counts)
            j = i + 1
            while j < n and line[j] != c:
                j += 2 if c == '"' and line[j] == "\\" else 1
            out.append(line[i:j + 1])
            i, start = j + 1, False
            continue
        out.append(c)
        i, start = i + 1, c.isspace()
    return "".join(out)


def planned_points(jobs_path):
    """[(model, value, device)] of the points a sweep planned: its
    RESULTS/EXP/jobs file (scripts/sweep.sh; each line runs sweep_point.sh
    with --device DEV, --expect model/=NAME and --expect factor_value=VALUE;
    the device without its index); [] where there is none or it cannot be read."""
    try:
        with open(jobs_path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    out = []
    for line in lines:
        try:
            words = shlex.split(ansi_c_words(line))
        except ValueError:
            continue
        exp, device = {}, "cpu"
        for i, w in enumerate(words[:-1]):
            if w == "--":
                break
            if w == "--expect":
                k, _, v = words[i + 1].partition("=")
                exp[k] = v
            elif w == "--device":
                device = words[i + 1].split(":")[0]
        point = (exp.get("model/"), exp.get("factor_value"), device)
        if point[0] and point[1] is not None and point not in out:
            out.append(point)
    return out


def unrun_models(runs, planned, values):
    """[(model, [values])] for the models a sweep planned (planned_points) of
    which no run file of the planned device was read: missing_points sees only
    models with runs, and a sweep stopped before its last model's points had
    left a table of the others saying nothing -- so had a CUDA sweep's whole
    plan beside a CPU sweep's files.  "model (device)" where runs or plan
    span several devices; values in the config's order, then the others."""
    have = {(r["model_name"], run_device(r)) for r in runs}
    several = len({run_device(r) for r in runs} | {d for _, _, d in planned}) > 1
    out = []
    for m, d in dict.fromkeys((m, d) for m, _, d in planned):
        if (m, d) in have or (m, "?") in have:  # (a file without a device attribute: any)
            continue
        vs = list(dict.fromkeys(v for mm, v, dd in planned if (mm, dd) == (m, d)))
        out.append((f"{m} ({d})" if several else m,
                    [v for v in values if v in vs] + [v for v in vs if v not in values]))
    return out


def experiments(results_dir):
    found = sorted(os.path.basename(d) for d in glob.glob(os.path.join(glob.escape(results_dir), "exp-*"))
                   if os.path.isdir(d))
    return [e for e in EXPERIMENTS if e in found] + [e for e in found if e not in EXPERIMENTS]


def uniq(runs, key):
    """The distinct values of attribute `key` over runs, as str, in first-seen
    order (runs without it skipped)."""
    out = []
    for r in runs:
        v = r["attrs"].get(key)
        if v is not None and str(v) not in out:
            out.append(str(v))
    return out


# /load_report rows that are not decoder linears: the embedding and lm_head
# run dense whatever the weights experiment measures.
NOT_LINEARS = ("model.embed_tokens", "lm_head")


def weights_as_run(run):
    """What the run's decoder linears ran as, from its /load_report/run_as
    ("dense f32", "ternary packed (native)", ...; distinct values joined by
    " + "), or None where the file has no load report."""
    rows = run.get("load_report")
    if not rows:
        return None
    seen = []
    for r in rows:
        if r["name"] not in NOT_LINEARS and r["run_as"] not in seen:
            seen.append(r["run_as"])
    return " + ".join(seen) if seen else None


def weights_label(run):
    """The label of a throughput run's weights: what ran (weights_as_run), not
    the config value -- exp-throughput's value `bf16` runs the checkpoint's
    weights dense, in f32 on the CPU and in bf16 on CUDA (the file's
    /throughput attribute dtype: every value runs the CUDA engine's bf16 form
    there).  Without a load report, the value with that said."""
    what = weights_as_run(run)
    # (the load report is the host model's: on CUDA the timed runs are the engine's
    # bf16 form, dense weights in bf16)
    if what and run.get("throughput_dtype") == "bf16":
        what = what.replace("dense f32", "dense bf16")
        if "dense bf16" not in what:
            what += " (CUDA bf16 form)"
    return what if what else f"{run['value']} (as run: not recorded)"


def values_in_order(runs):
    """The runs' values, in the config's order (load_with_missing's value_rank;
    first seen after them): taken in the runs' order, a model that lacked a
    value had put the values after it out of order on the figure's axis."""
    seen = []
    for r in runs:
        if r["value"] not in seen:
            seen.append(r["value"])
    rank = {r["value"]: r.get("value_rank", len(seen)) for r in runs}
    return sorted(seen, key=lambda v: (rank[v], seen.index(v)))


def models_in_order(runs):
    seen = []
    for r in runs:
        if r["model_name"] not in seen:
            seen.append(r["model_name"])
    return seen


def is_throughput(runs):
    return any(len(r["throughput"].get("batch", [])) > 0 for r in runs) and \
        all(r["attrs"].get("experiment", "") == "exp-throughput" for r in runs)


def run_per_experiment(tool, doc, default_out, per_experiment):
    """The command line shared by figures.py and tables.py: --results, --out,
    --configs and optional experiment names; calls per_experiment(exp, runs,
    out_dir, missing) for every experiment that has complete run files
    (missing: missing_points against each model's grid, and unrun_models:
    the models of the last sweep's plan with no run file)."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--results", default=None, help="results folder (default results/)")
    ap.add_argument("--out", default=default_out)
    ap.add_argument("--configs", default="configs")
    ap.add_argument("exps", nargs="*", help="experiments (default: every one in --results)")
    a = ap.parse_args()
    given, a.results = a.results is not None, a.results or "results"
    # (a name as a shell completes a folder, exp-kv-ternary/, had skipped every run as
    # another experiment's and written nothing, exit 0)
    a.exps = [e.rstrip("/") or e for e in a.exps]
    err = check_results_arg(tool, a.results, a.exps, a.configs, given)
    if err:
        return err
    exps = a.exps or experiments(a.results)
    if not exps:
        print(f"{tool}: no results under {a.results}/exp-* (run make exp-... first)")
        return 0
    rc = 0
    try:
        os.makedirs(a.out, exist_ok=True)
        for exp in exps:
            try:
                runs, missing = load_with_missing(a.results, exp, a.configs)
            except (RuntimeError, TypeError, ValueError, KeyError) as e:  # (said; the others go on)
                print(f"{tool}: {exp}: skipped: its run files could not be read ({type(e).__name__}: {e})",
                      file=sys.stderr)
                rc = 1
                continue
            if not runs:
                print(f"{tool}: {exp}: no complete run files in {a.results}/{exp}, skipped",
                      file=sys.stderr if a.exps else sys.stdout)
                rc = 1 if a.exps else rc  # (an experiment asked for by name and not there)
                continue
            try:
                per_experiment(exp, runs, a.out, missing)
            except (TypeError, ValueError, KeyError) as e:  # (a run of a form the checks let by:
                # said, and the other experiments' tables still written)
                print(f"{tool}: {exp}: skipped: a run file of an unexpected form ({type(e).__name__}: {e})",
                      file=sys.stderr)
                rc = 1
    except OSError as e:  # (a full disk, a read-only folder, an unreadable config: said, not a traceback)
        print(f"{tool}: {e}", file=sys.stderr)
        return 1
    return rc


def check_results_arg(tool, results, exps, configs, given=True, required=False):
    """0, or 2 with a message on stderr: --results (given) must be a folder,
    not an experiment's own folder; experiments named must be known (a config
    in configs/ or a folder in results/).  (The default results/ may be
    absent, nothing has run yet, unless the tool requires runs.)"""
    if not os.path.isdir(results) and (given or exps or required):
        print(f"{tool}: " + (f"--results {results}: no such folder" if given else
                             f"no {results}/ folder here (no experiment has run; --results DIR)"),
              file=sys.stderr)
        return 2
    # (run files are named <model>__<value>[__<device>].h5; bench_cpu.h5 / bench_e2e.h5 live here too)
    if not exps and not experiments(results) and glob.glob(os.path.join(glob.escape(results), "*__*.h5")):
        print(f"{tool}: --results {results} holds run files itself: give the folder above it "
              f"(the one that holds exp-*/)", file=sys.stderr)
        return 2
    for e in exps:
        if not os.path.isfile(os.path.join(configs, e + ".conf")) and \
                not os.path.isdir(os.path.join(results, e)):
            known = sorted(set(EXPERIMENTS) | set(experiments(results)))
            print(f"{tool}: unknown experiment '{e}' (known: {' '.join(known)})", file=sys.stderr)
            return 2
    return 0
