# transformers' inv_freq for real checkpoints' llama3 RoPE scalings, computed on
# the CPU without a model: more frequencies in llama3's smooth band than
# llama-tiny's two (rope.reference.json), for a test of rope_inv_freq bit for
# bit.  Runs wherever PyTorch + transformers are (no GPU needed), from the
# repository root:
#   OUT=DIR python3 data/fixture-scripts/make_rope_freq_refs.py   (writes DIR/rope_freq_cases.json)
# data/llama-tiny/rope_freq_cases.json is its output (PyTorch 2.11.0 + transformers
# 5.17.0 from PyPI, the versions of the other references, on an Intel Xeon CPU);
# tests/test_forward_llama.c reads it.
import json, os

import torch
import transformers
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

OUT = os.environ.get("OUT", "/tmp/out")
CASES = {  # Llama 3.1 8B / 70B / 405B; Llama 3.2 1B / 3B; a head_dim 128, theta 1e4, original 1024 one
    "llama3.1": dict(head_dim=128, rope_theta=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                     original_max_position_embeddings=8192),
    "llama3.2": dict(head_dim=64, rope_theta=500000.0, factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                     original_max_position_embeddings=8192),
    "hd128-1e4-1024": dict(head_dim=128, rope_theta=10000.0, factor=4.0, low_freq_factor=1.0,
                           high_freq_factor=4.0, original_max_position_embeddings=1024),
}
ref = {"torch": torch.__version__, "transformers": transformers.__version__, "cases": {}}
for name, cs in CASES.items():
    hd = cs["head_dim"]
    rp = {k: v for k, v in cs.items() if k != "head_dim"}
    rp["rope_type"] = "llama3"
    cfg = transformers.LlamaConfig(hidden_size=32 * hd, num_attention_heads=32, head_dim=hd,
                                   max_position_embeddings=131072, rope_parameters=rp)
    inv, att = ROPE_INIT_FUNCTIONS["llama3"](cfg, "cpu")
    assert att == 1.0
    ref["cases"][name] = {"head_dim": hd, "rope_parameters": rp, "inv_freq": [float(v) for v in inv.float()]}
    print(name, ref["cases"][name]["inv_freq"][:4], "...")
json.dump(ref, open(os.path.join(OUT, "rope_freq_cases.json"), "w"), indent=1)
