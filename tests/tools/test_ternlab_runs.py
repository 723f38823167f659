#!/usr/bin/python3
"""Unit checks of scripts/ternlab_runs.py's readers and writers, run by the
C test scripts_ternlab_runs_helpers (tests/test_sweep.c) with Debian's
/usr/bin/python3 (h5py).  Each check names what a wrong helper had done;
exit 1 with the failed checks listed, 0 when all hold.

usage: test_ternlab_runs.py REPO_ROOT TMPDIR"""
import contextlib
import io
import os
import shlex
import subprocess
import sys

import h5py

ROOT, TMP = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import ternlab_runs as tr  # noqa: E402

failed = []


def check(cond, what):
    if not cond:
        failed.append(what)


def fake_run(path, value):
    """A complete run file, as an experiment program writes it (tests/tools/fake_exp.py)."""
    subprocess.run([sys.executable, os.path.join(ROOT, "tests/tools/fake_exp.py"), "--model", "data/m1",
                    "--value", value, "--out", path], check=True, env=dict(os.environ, FAKE_SLEEP="0"))


# conf_list: an inline "# comment" after the values is not a value (same rule as expconf.c)
cdir = os.path.join(TMP, "configs")
os.makedirs(cdir, exist_ok=True)
with open(os.path.join(cdir, "exp-x.conf"), "w", encoding="utf-8") as f:
    f.write("# a comment line\nvalues = a b  # note on them\nmodels = m#1 m2\n")
check(tr.conf_list(cdir, "exp-x", "values") == ["a", "b"], "conf_list kept an inline comment as values")
check(tr.conf_list(cdir, "exp-x", "models") == ["m#1", "m2"], "conf_list cut a value at a '#' inside it")
check(tr.conf_list(cdir, "exp-none", "values") == [], "conf_list of a missing config is not empty")

# planned_points: a sweep's jobs file, paths quoted by the shell; the program's own
# arguments after "--" are not the point's; a line that does not parse is skipped
jobs = os.path.join(TMP, "jobs")
with open(jobs, "w", encoding="utf-8") as f:
    f.write("bash scripts/sweep_point.sh 'r s/m 1__a.h5' --device cpu --expect experiment=exp-x "
            "--expect factor_value=a --expect 'model/=m 1' --tag t -- prog --expect model/=other\n"
            "bash scripts/sweep_point.sh 'unclosed\n"
            "bash scripts/sweep_point.sh o.h5 --expect factor_value=b --expect model/=m2 -- prog\n"
            "bash scripts/sweep_point.sh o.h5 --device cuda:1 --expect factor_value=b --expect model/=m2 -- prog\n")
check(tr.planned_points(jobs) == [("m 1", "a", "cpu"), ("m2", "b", "cpu"), ("m2", "b", "cuda")],
      f"planned_points read {tr.planned_points(jobs)}")
check(tr.planned_points(os.path.join(TMP, "nojobs")) == [], "planned_points of a missing jobs file is not empty")
# bash's $'...' words, as printf %q writes bytes outside ASCII under the C locale (a
# cluster's usual one): read back as the value (shlex had failed on the line and the model's
# plan was dropped)
for v in ("model/=mod\u00e8le", "factor_value=a\tb'c\\d e\u00e8"):
    qv = subprocess.run(["bash", "-c", 'printf "%q" "$1"', "_", v], capture_output=True, text=True,
                        env=dict(os.environ, LC_ALL="C"), check=True).stdout
    check(qv.startswith("$'"), f"printf %q under LC_ALL=C wrote {qv!r}")
    got = shlex.split(tr.ansi_c_words(f"x --expect {qv} -- y"))
    check(got == ["x", "--expect", v, "--", "y"], f"ansi_c_words read {qv!r} as {got}")
with open(jobs, "w", encoding="utf-8") as f:
    f.write("bash scripts/sweep_point.sh o.h5 --device cpu --expect $'factor_value=\\303\\251' "
            "--expect $'model/=mod\\303\\250le' -- prog\n")
check(tr.planned_points(jobs) == [("mod\u00e8le", "\u00e9", "cpu")], f"planned_points read {tr.planned_points(jobs)}")
# ... only before the word "--": a template's command after it is the program's own (its
# sh -c 'x$'\''s', the usual quote-escape after a $, had been taken for such a word and the
# line dropped)
with open(jobs, "w", encoding="utf-8") as f:
    f.write("bash scripts/sweep_point.sh 'a -- b.h5' --expect factor_value=a --expect model/=m1 -- "
            "sh -c 'grep -c x$'\\''s' $'--'\n")
check(tr.planned_points(jobs) == [("m1", "a", "cpu")], f"planned_points read {tr.planned_points(jobs)}")
m2b = [{"model_name": "m2", "value": "b", "attrs": {"device": "cpu"}}]
check(tr.unrun_models(m2b, [("m 1", "z", "cpu"), ("m 1", "a", "cpu"), ("m2", "b", "cpu")], ["a", "b"]) ==
      [("m 1", ["a", "z"])], "unrun_models named a model with runs, or lost a value or its order")
# a CUDA sweep's plan beside CPU files: its models named with the device (they had been
# taken as run, having CPU files)
got = tr.unrun_models(m2b, [("m 1", "a", "cpu"), ("m2", "b", "cpu"), ("m2", "b", "cuda")], ["a", "b"])
check(got == [("m 1 (cpu)", ["a"]), ("m2 (cuda)", ["b"])], f"unrun_models ignored the plan's device: {got}")


# missing_points: a model's grid is the last sweep's plan for it (a `values=` override
# planned a and z of the config's a b c: b and c are not missing, z is), per device
# where runs of several share the folder; the config's values for a model the plan has not
def runs_of(*points):
    return [{"model_name": m, "value": v, "attrs": {"device": d}} for m, v, d in points]


plan = [("m1", "a", "cpu"), ("m1", "z", "cpu")]
got = tr.missing_points(runs_of(("m1", "a", "cpu"), ("m2", "a", "cpu")), ["a", "b", "c"], plan)
check(got == [("m1", ["z"], True), ("m2", ["b", "c"], False)],
      f"missing_points took the config's values for a planned model, or the plan for another: {got}")
got = tr.missing_points(runs_of(("m1", "a", "cpu"), ("m1", "b", "cuda:0")), ["a", "b"], plan)
check(got == [("m1 (cpu)", ["z"], True), ("m1 (cuda)", ["a"], False)],
      f"missing_points applied a CPU sweep's plan to the CUDA runs: {got}")
check(tr.missing_points(runs_of(("m1", "a", "cpu")), ["a", "b"]) == [("m1", ["b"], False)],
      "missing_points without a plan did not fall back to the config's values")
got = tr.missing_points(runs_of(("m1", "a", "cpu")), ["a", "b"], [("m1", "a", "cuda"), ("m1", "z", "cuda")])
check(got == [("m1", ["b"], False)], f"missing_points held the CPU runs to a CUDA sweep's plan: {got}")

# read_run: a file without complete = 1 is skipped (sweep.sh reruns it), not read as a run
good = os.path.join(TMP, "m1__a.h5")
fake_run(good, "a")
check(tr.read_run(good) is not None, "read_run skipped a complete run file")
nocomp = os.path.join(TMP, "m1__nocomplete.h5")
fake_run(nocomp, "b")
with h5py.File(nocomp, "r+") as f:
    del f.attrs["complete"]
check(tr.read_run(nocomp) is None, "read_run took a file without the complete attribute")
with h5py.File(nocomp, "r+") as f:
    f.attrs["complete"] = 2
check(tr.read_run(nocomp) is None, "read_run took complete = 2 (only 1 is complete)")

# read_run: a complete file of another form (paper/SCHEMA.md's types) is skipped with a
# warning; each of these had stopped make tables with a traceback, and every later table
# with it
def put(f, path, v):
    if path in f:
        del f[path]
    f[path] = v


for name, edit in (("scalarbatch", lambda f: put(f, "/throughput/batch", 1)),
                   ("kvstr", lambda f: (put(f, "/kv/policy", "none"), put(f, "/kv/bytes_per_token", "many"))),
                   ("numfactor", lambda f: f.attrs.__setitem__("factor", 3)),
                   ("numkvpolicy", lambda f: put(f, "/kv/policy", 3.0))):
    odd = os.path.join(TMP, f"m1__{name}.h5")
    fake_run(odd, name)
    with h5py.File(odd, "r+") as f:
        edit(f)
    check(tr.read_run(odd) is None, f"read_run took a file with {name}")
kvok = os.path.join(TMP, "m1__kvok.h5")
fake_run(kvok, "kvok")
with h5py.File(kvok, "r+") as f:
    put(f, "/kv/policy", "none")
    put(f, "/kv/bytes_per_token", 12.5)
r = tr.read_run(kvok)
check(r is not None and r["kv"] == {"policy": "none", "bytes_per_token": 12.5}, f"read_run of /kv gave {r and r['kv']}")

# read_run: a file whose local heap is damaged (h5py raises RuntimeError, not OSError: "bad
# local heap signature") is skipped with a warning; it had stopped every experiment's table
heapbad = os.path.join(TMP, "m1__heapbad.h5")
fake_run(heapbad, "heapbad")
with open(heapbad, "rb") as f:
    data = f.read()
check(b"HEAP" in data, "the fake run file has no local heap to damage")
with open(heapbad, "wb") as f:
    f.write(data.replace(b"HEAP", b"XEAP", 1))
try:
    check(tr.read_run(heapbad) is None, "read_run took a file with a damaged local heap")
except Exception as e:  # noqa: BLE001 - the failure this check is about
    check(False, f"read_run raised on a damaged local heap: {type(e).__name__}: {e}")
# read_run: a complete HDF5 file that is not a run (no model / factor_value: a reference
# cache copied into the folder) is skipped, not a row "? | ?"
notrun = os.path.join(TMP, "m1__notrun.h5")
fake_run(notrun, "notrun")
with h5py.File(notrun, "r+") as f:
    del f.attrs["model"]
check(tr.read_run(notrun) is None, "read_run took a complete file without a model attribute")


# warn_mixed_settings: one model's runs under another weight spec past the factor's own key
# (a quant= override on one sweep), or another KV policy or tp, are said; the factor's own
# key differing (rule=) is not
def mixed(factor, *specs):
    rs = [{"model_name": m, "path": f"{m}__{i}.h5",
           "attrs": {"factor": factor, "quant_spec": q, "kv_policy": kv, "tp": tp}}
          for i, (m, q, kv, tp) in enumerate(specs)]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        tr.warn_mixed_settings(rs, "exp-x")
    return err.getvalue()


w = mixed("rule", ("m1", "rule=twn,group=128", "none", 1), ("m1", "rule=std,group=128", "none", 1),
          ("m2", "rule=twn,group=64", "none", 1))
check(w == "", f"warn_mixed_settings warned on the factor's own key or across models: {w!r}")
w = mixed("kv", ("m1", "loaded", "none", 1), ("m1", "rule=absmean,group=128", "all", 1))
check("m1's runs differ in quant_spec" in w and "kv_policy" not in w,
      f"warn_mixed_settings missed a model's mixed weights (or warned on the factor): {w!r}")
w = mixed("rule", ("m1", "rule=twn", "none", 1), ("m1", "rule=std", "all", 2))
check("the runs differ in kv_policy" in w and "the runs differ in tp" in w,
      f"warn_mixed_settings missed a KV policy or tp that differ: {w!r}")
check(mixed("weights", ("m1", "loaded", "none", 1), ("m1", "rule=absmean", "none", 1)) == "",
      "warn_mixed_settings warned on exp-throughput's weights, its factor")

# a results folder whose name holds glob characters ([, ], *, ?) is read as it is named (it
# had been read as empty: "no results", exit 0)
rdir = os.path.join(TMP, "res[2]*")
os.makedirs(os.path.join(rdir, "exp-fake"), exist_ok=True)
fake_run(os.path.join(rdir, "exp-fake", "m1__a.h5"), "a")
check(tr.experiments(rdir) == ["exp-fake"], f"experiments() of a folder named res[2]* gave {tr.experiments(rdir)}")
check(len(tr.load(rdir, "exp-fake", cdir)) == 1, "load() of a folder named res[2]* found no run")
# an experiment named as a shell completes its folder (exp-fake/) is that experiment (every
# run had been skipped as another experiment's, no table written, exit 0)
pr = subprocess.run([sys.executable, os.path.join(ROOT, "scripts/tables.py"), "--results", rdir, "--configs", cdir,
                     "--out", os.path.join(TMP, "tslash"), "exp-fake/"], capture_output=True, text=True, check=False)
check(pr.returncode == 0 and os.path.exists(os.path.join(TMP, "tslash", "exp-fake.md")) and "skipping" not in pr.stderr,
      f"tables.py exp-fake/: rc {pr.returncode}, {pr.stderr!r}")

# paper.py: a --paper that is a file is said in a line (it had been a traceback); runs that
# record no created_utc give a paper that says so (min() of no dates had been a traceback)
with h5py.File(os.path.join(rdir, "exp-fake", "m1__a.h5"), "r+") as f:
    del f.attrs["created_utc"]
afile = os.path.join(TMP, "afile")
open(afile, "w", encoding="utf-8").close()
paper = [sys.executable, os.path.join(ROOT, "scripts/paper.py"), "--results", rdir, "--configs", cdir, "--paper"]
pr = subprocess.run(paper + [afile], capture_output=True, text=True, check=False)
check(pr.returncode == 1 and pr.stderr.startswith("paper.py: ") and "Traceback" not in pr.stderr,
      f"paper.py --paper FILE: rc {pr.returncode}, {pr.stderr!r}")
pr = subprocess.run(paper + [os.path.join(TMP, "pp")], capture_output=True, text=True, check=False)
with open(os.path.join(TMP, "pp", "paper.md"), encoding="utf-8") as f:
    check(pr.returncode == 0 and "record no date" in f.read(), f"paper.py without dates: rc {pr.returncode}, {pr.stderr!r}")

# replace_atomic: a writer that fails half way leaves the old file and no temporary
target = os.path.join(TMP, "table.md")
with open(target, "w", encoding="utf-8") as f:
    f.write("old\n")


def half_then_fail(tmp):
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("new, cut sh")
    raise RuntimeError("writer failed")


try:
    tr.replace_atomic(target, half_then_fail)
    check(False, "replace_atomic swallowed the writer's error")
except RuntimeError:
    pass
with open(target, encoding="utf-8") as f:
    check(f.read() == "old\n", "replace_atomic left a half-written file in place of the old one")
check(not [n for n in os.listdir(TMP) if n.startswith("table.md.tmp")], "replace_atomic left its temporary")
tr.write_atomic(target, "new\n")
with open(target, encoding="utf-8") as f:
    check(f.read() == "new\n", "write_atomic did not replace the file")

# crash_free: a file that crashes libhdf5 is skipped, and only it: the files before and
# after it are kept, in order (tests/data/run-damaged-global-heap.h5 crashes Debian's libhdf5)
bad = os.path.join(ROOT, "tests/data/run-damaged-global-heap.h5")
good2 = os.path.join(TMP, "m1__c.h5")
fake_run(good2, "c")
for order in ([bad, good, good2], [good, bad, good2], [good, good2, bad]):
    want = [p for p in order if p != bad]
    got = tr.crash_free(order)
    check(got == want, f"crash_free({[os.path.basename(p) for p in order]}) gave "
                       f"{[os.path.basename(p) for p in got]}")

for what in failed:
    print("FAIL:", what)
print(f"{len(failed)} failed")
sys.exit(1 if failed else 0)
