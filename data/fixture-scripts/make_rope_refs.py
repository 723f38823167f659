# Reference logits of llama-tiny under scaled RoPE (transformers' "llama3" and
# "linear" rope types), computed by PyTorch + transformers, for the loader's
# rope-scaling tests.  Runs on the GPU machine from the repository root:
#   python3 data/fixture-scripts/make_rope_refs.py      (writes to $OUT)
# Same weights as data/llama-tiny; only config.json changes.  Each variant's
# logits of perplexity window 0 (tokens 0..255 of wikitext2-test.tokens.i32),
# fp32 forward, and the model's own inv_freq buffer go into rope.reference.json
# and <variant>.ref_logits.f32 (f32 [256, 2048]).
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
}

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
ref["default_vs_fixture_max_abs"] = float((lg0 - fix).abs().max())
print("default rope against the fixture's logits: max |diff|", ref["default_vs_fixture_max_abs"])
for name, rp in VARIANTS.items():
    cfg = dict(base_cfg)
    cfg["rope_parameters"] = dict(rp, rope_theta=theta)
    lg, inv, att = run(cfg)
    # the legacy spelling (transformers 4: rope_scaling beside a top-level rope_theta;
    # linear's key "type") must give the same logits
    leg = dict(base_cfg)
    del leg["rope_parameters"]
    leg["rope_theta"] = theta
    rs = dict(rp)
    if name == "linear":
        rs["type"] = rs.pop("rope_type")
    leg["rope_scaling"] = rs
    lg_leg, inv_leg, _ = run(leg)
    same = bool(torch.equal(lg, lg_leg)) and inv == inv_leg
    rel = float((lg - lg0).norm() / lg0.norm())
    print(name, "inv_freq", inv, "attention_scaling", att, "legacy spelling same:", same,
          "rel L2 against default rope", rel)
    assert same and att == 1.0
    open(os.path.join(OUT, f"{name}.ref_logits.f32"), "wb").write(lg.contiguous().numpy().tobytes())
    ref["variants"][name] = {"rope_parameters": cfg["rope_parameters"], "inv_freq": inv,
                             "attention_scaling": att, "rel_l2_vs_default_rope": rel}
ref["default_inv_freq"] = inv0
json.dump(ref, open(os.path.join(OUT, "rope.reference.json"), "w"), indent=1)
print("wrote", sorted(os.listdir(OUT)))
