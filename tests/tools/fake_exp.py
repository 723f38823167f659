#!/usr/bin/python3
"""Stand-in for an experiment program (build/exp_*) in the sweep tests.

Same command line as the real ones (--model M --value V --out F [--config C]
[key=value...]; the window recorded is C's `window`, else 16)
and the same way of writing: every dataset and root attribute of the run-file
schema (paper/SCHEMA.md) into F.tmp.<pid>, the root attribute complete = 1
last, fsync, rename to F.  It sleeps FAKE_SLEEP seconds (default 0.3) half way
through, so that a test can kill it while the temporary file is open.
FAKE_FAIL=V makes the point with value V exit 1 without writing F;
FAKE_DEVICE=D records device D (default cpu).
Run with /usr/bin/python3 (Debian's python3-h5py)."""
import os
import sys
import time

import h5py
import numpy as np


def main(argv):
    args, overrides = {}, []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--model", "--value", "--out", "--config"):
            args[a[2:]] = argv[i + 1]
            i += 2
        elif "=" in a and not a.startswith("-"):
            overrides.append(a)
            i += 1
        else:
            print(f"fake_exp: unexpected argument {a}", file=sys.stderr)
            return 2
    for k in ("model", "value", "out"):
        if k not in args:
            print(f"fake_exp: --{k} is required", file=sys.stderr)
            return 2
    if os.environ.get("FAKE_FAIL") == args["value"]:
        print(f"fake_exp: failing on purpose for value {args['value']}", file=sys.stderr)
        return 1
    out = args["out"]
    tmp = f"{out}.tmp.{os.getpid()}"
    f = h5py.File(tmp, "w")
    a = f.attrs
    for k, v in {"ternlab_version": "fake", "git_commit": "none", "experiment": "exp-fake",
                 "factor": "value", "factor_value": args["value"], "model": args["model"],
                 "model_sha256": "0" * 64, "tokens": "none", "tokens_sha256": "0" * 64, "quant_spec": "none",
                 "kv_policy": "none", "device": os.environ.get("FAKE_DEVICE", "cpu"), "host": os.uname().nodename,
                 "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "overrides": " ".join(overrides)}.items():
        a[k] = v
    a["threads"] = np.int64(3)  # (an int64 attribute, as the programs write it)
    if os.environ.get("TERNLAB_SWEEP_POINT"):  # (as the experiment programs record it)
        a["sweep_point"] = os.environ["TERNLAB_SWEEP_POINT"]
    window = 16
    if "config" in args:
        with open(args["config"], encoding="utf-8") as c:
            for line in c:
                k, _, v = line.partition("=")
                if k.strip() == "window":
                    window = int(v.split("#")[0])
    a["window"] = np.int64(window)
    a["tp"] = np.int64(1)
    for k in ("ppl", "ppl_ref", "nll_mean", "kl_mean", "top1_agree", "logit_rel_l2"):
        f[f"/metrics/{k}"] = np.float64(1.5)
    for k in ("nll", "nll_ref", "kl"):
        f[f"/per_token/{k}"] = np.arange(30, dtype=np.float32)
    f["/logits/positions"] = np.arange(2, dtype=np.int64)
    f["/logits/test"] = np.zeros((2, 5), dtype=np.float32)
    f["/logits/ref"] = np.ones((2, 5), dtype=np.float32)
    f.flush()
    time.sleep(float(os.environ.get("FAKE_SLEEP", "0.3")))
    f["/throughput/batch"] = np.array([1], dtype=np.int64)
    for k in ("prefill_tok_s", "decode_tok_s", "latency_ms_p50", "latency_ms_p99"):
        f[f"/throughput/{k}"] = np.array([1.0])
    f["/weights/name"] = np.array(["w"], dtype=h5py.string_dtype())
    for k in ("sparsity", "rel_err", "scale_min", "scale_max"):
        f[f"/weights/{k}"] = np.array([0.5])
    f["/weights/bytes"] = np.array([10], dtype=np.int64)
    f["/kv/bytes_per_token"] = np.float64(8.0)
    f.create_dataset("/kv/policy", data="none", dtype=h5py.string_dtype())
    a["complete"] = np.int64(1)
    f.close()
    fd = os.open(tmp, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    os.rename(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
