# Reference logits of llama-tiny under scaled RoPE (transformers' "llama3",
# "linear", "yarn", "dynamic" and "longrope" rope types), computed by PyTorch + transformers, for the
# loader's rope-scaling tests.  Runs from the repository root (on a GPU where
# there is one, else on the CPU; "made" in the JSON says which):
#   OUT=DIR python3 data/fixture-scripts/make_rope_refs.py          (writes to DIR)
#   OUT=DIR ONLY=yarn,yarn_opts,dynamic python3 ...   (those variants; the others' entries kept)
# Same weights as data/llama-tiny; only config.json changes.  Each variant's
# logits of perplexity window 0 (tokens 0..255 of wikitext2-test.tokens.i32),
# fp32 forward, and the model's own inv_freq buffer go into rope.reference.json
# and rope_<variant>.ref_logits.f32 (f32 [256, 2048]); the variants in
# FREQ_ONLY only their inv_freq and attention factor (no logits file).
import json, os, shutil, sys, tempfile

import torch
import transformers

OUT = os.environ.get("OUT", "/tmp/out")
SRC = "data/llama-tiny"
T = 256
torch.backends.cuda.matmul.allow_tf32 = False
dev = "cuda" if torch.cuda.is_available() else "cpu"

VARIANTS = {
    # original_max_position_embeddings 256 puts head_dim 32's sixteen frequencies
    # in all three of llama3's bands (wavelength < 64: kept; 64 .. 256: smoothed;
    # > 256: divided by the factor) within one 256-token window
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 256},
    "linear": {"rope_type": "linear", "factor": 4.0},
    # yarn at original 256: head_dim 32's correction range is dims 0 .. 7 of 16 (beta 32 / 1,
    # truncated), so frequencies kept, blended and interpolated; attention factor
    # 0.1 ln 4 + 1 on cos and sin
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256},
    # every optional key: betas, no truncation, the factor from mscale / mscale_all_dim
    "yarn_opts": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256,
                  "beta_fast": 16.0, "beta_slow": 2.0, "mscale": 1.0, "mscale_all_dim": 0.5, "truncate": False},
    # factor null (DeepSeek-V3's form): max_position_embeddings / original = 1024 / 512 = 2
    "yarn_null": {"rope_type": "yarn", "factor": None, "original_max_position_embeddings": 512},
    # dynamic NTK (Llama 2 fine-tunes' "type": "dynamic"): up to max_position_embeddings (1024)
    # transformers keeps the default frequencies (theta scaled by 1)
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    # LongRoPE (Phi-3's) up to its original length 512: each frequency over its short factor
    # (1 .. 3.055, float32-rounded); the long ones (past 512) unused in a 256-token window.
    # No factor: max_position_embeddings / original = 2, attention factor sqrt(1 + ln 2 / ln 512)
    "longrope": {"rope_type": "longrope", "original_max_position_embeddings": 512,
                 "short_factor": [round(1.0 + 0.137 * i, 3) for i in range(16)],
                 "long_factor": [round(1.0 + 4.1 * i, 3) for i in range(16)]},
    # factor given (16: attention factor sqrt(1 + ln 16 / ln 512)), other short factors
    "longrope_opts": {"rope_type": "longrope", "original_max_position_embeddings": 512, "factor": 16.0,
                      "short_factor": [round(0.9 + 0.071 * i * i / 15, 4) for i in range(16)],
                      "long_factor": [round(2.0 + 3.3 * i, 3) for i in range(16)]},
}
FREQ_ONLY = {"longrope_opts", "yarn_null"}
# variants whose references were made earlier (on an H100, whose logits may differ from
# a CPU's in the last bits): ONLY=yarn,yarn_opts,dynamic runs those and keeps the others' entries
ONLY = [v for v in os.environ.get("ONLY", "").split(",") if v]

raw = open("data/wikitext2-test.tokens.i32", "rb").read(4 * T)
ids = torch.frombuffer(bytearray(raw), dtype=torch.int32).to(torch.long)[None].to(dev)
base_cfg = json.load(open(os.path.join(SRC, "config.json")))
theta = base_cfg["rope_parameters"]["rope_theta"]


def run(cfg):
    d = tempfile.mkdtemp()
    for fn in os.listdir(SRC):
        if fn != "config.json":
            os.symlink(os.path.abspath(os.path.join(SRC, fn)), os.path.join(d, fn))
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=1)
    m = transformers.LlamaForCausalLM.from_pretrained(d, dtype=torch.float32).to(dev).eval()
    with torch.no_grad():
        lg = m(input_ids=ids).logits.float()[0].cpu()
    rot = m.model.rotary_emb
    inv = [float(v) for v in rot.inv_freq.float().cpu()]
    shutil.rmtree(d)
    return lg, inv, float(rot.attention_scaling)


ref = {"torch": torch.__version__, "transformers": transformers.__version__, "window": T,
       "tokens": "wikitext2-test.tokens.i32[0:256]", "variants": {}}
lg0, inv0, _ = run(base_cfg)
fix = torch.frombuffer(bytearray(open(os.path.join(SRC, "ref_logits.f32"), "rb").read(4 * T * 2048)),
                       dtype=torch.float32).view(T, 2048)
here = float((lg0 - fix).abs().max())
print("default rope against the fixture's logits: max |diff|", here)
# (where each variant was made; the default rope's logits there against ref_logits.f32)
made_on = "GPU (CUDA)" if dev == "cuda" else "CPU"
if ONLY:
    old = json.load(open(os.path.join(SRC, "rope.reference.json")))
    ref["variants"] = {k: v for k, v in old["variants"].items() if k not in ONLY}
    ref["made"] = old.get("made", {k: "H100 (CUDA)" for k in ref["variants"]})
    ref["default_vs_fixture_max_abs"] = old.get("default_vs_fixture_max_abs", {})
    if not isinstance(ref["default_vs_fixture_max_abs"], dict):
        ref["default_vs_fixture_max_abs"] = {"H100 (CUDA)": ref["default_vs_fixture_max_abs"]}
else:
    ref["made"] = {}
    ref["default_vs_fixture_max_abs"] = {}
ref["default_vs_fixture_max_abs"][made_on] = here
for name, rp in VARIANTS.items():
    if ONLY and name not in ONLY:
        continue
    ref["made"][name] = made_on
    cfg = dict(base_cfg)
    cfg["rope_parameters"] = dict(rp, rope_theta=theta)
    lg, inv, att = run(cfg)
    # the legacy spelling (transformers 4: rope_scaling beside a top-level rope_theta;
    # linear's key "type") must give the same logits
    leg = dict(base_cfg)
    del leg["rope_parameters"]
    leg["rope_theta"] = theta
    rs = dict(rp)
    if name in ("linear", "yarn", "dynamic", "longrope", "longrope_opts"):
        rs["type"] = rs.pop("rope_type")
    if name == "yarn":
        rs["finetuned"] = True  # (a key of YaRN checkpoints' configs that transformers ignores)
    leg["rope_scaling"] = rs
    lg_leg, inv_leg, _ = run(leg)
    same = bool(torch.equal(lg, lg_leg)) and inv == inv_leg
    rel = float((lg - lg0).norm() / lg0.norm())
    print(name, "inv_freq", inv, "attention_scaling", att, "legacy spelling same:", same,
          "rel L2 against default rope", rel)
    assert same and (att == 1.0) == (rp["rope_type"] not in ("yarn", "longrope"))
    if name == "yarn_null":  # (the same as factor 2 given)
        same2 = run(dict(base_cfg, rope_parameters=dict(rp, factor=2.0, rope_theta=theta)))
        assert same2[1] == inv and same2[2] == att
    if name not in FREQ_ONLY:
        open(os.path.join(OUT, f"rope_{name}.ref_logits.f32"), "wb").write(lg.contiguous().numpy().tobytes())
    ref["variants"][name] = {"rope_parameters": cfg["rope_parameters"], "inv_freq": inv,
                             "attention_scaling": att, "rel_l2_vs_default_rope": rel,
                             "logits": name not in FREQ_ONLY}
ref["default_inv_freq"] = inv0
json.dump(ref, open(os.path.join(OUT, "rope.reference.json"), "w"), indent=1)
print("wrote", sorted(os.listdir(OUT)))
