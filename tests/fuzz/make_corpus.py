#!/usr/bin/env python3
"""Writes the seed corpora of the fuzzing harnesses (tests/fuzz/corpus/<name>/)
from the embedded fixtures and a few hand-made inputs.  Run from the repository
root; the output is committed, so this only documents where each seed came
from and lets us regenerate them.  Checkpoint seeds keep headers only (the
first 8 + N bytes of a safetensors file, a GGUF up to its data section), never
the weights."""
import json
import os
import struct

OUT = "tests/fuzz/corpus"


def put(name, fname, data):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, fname), "wb") as f:
        f.write(data)


def st_image(tensors, meta=None, pad=b""):
    """A whole small safetensors file: tensors = [(name, dtype, shape, nbytes)]."""
    hdr, off = {}, 0
    if meta is not None:
        hdr["__metadata__"] = meta
    for name, dt, shape, nb in tensors:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + nb]}
        off += nb
    h = json.dumps(hdr, separators=(",", ":")).encode() + pad
    return struct.pack("<Q", len(h)) + h + bytes(range(256)) * (off // 256) + bytes(off % 256)


# ---- safetensors: real headers (no weights) + tiny whole files ----------
for model in ("llama-tiny", "bitnet-tiny"):
    with open(f"data/{model}/model.safetensors", "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        f.seek(0)
        put("safetensors", f"{model}-header", f.read(8 + n))
put("safetensors", "tiny-valid", st_image(
    [("a", "F32", [2, 3], 24), ("b", "BF16", [4], 8), ("c", "U8", [3, 1], 3),
     ("d", "I8", [], 1), ("e", "F16", [0, 5], 0)], meta={"format": "pt"}, pad=b"  "))
_ov = b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}'
put("safetensors", "tiny-overlap", struct.pack("<Q", len(_ov)) + _ov + bytes(8))
put("safetensors", "empty-object", struct.pack("<Q", 2) + b"{}")
put("safetensors", "bad-dtype", st_image([("x", "F64", [1], 8)]))

# ---- st_index: sharded index over the harness's two shards ----------------
index = {"metadata": {"total_size": 48},
         "weight_map": {"a": "model-00001-of-00002.safetensors",
                        "b": "model-00001-of-00002.safetensors",
                        "c": "model-00002-of-00002.safetensors"}}
put("st_index", "valid", json.dumps(index, indent=2))
put("st_index", "one-shard", json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors",
                                                          "b": "model-00001-of-00002.safetensors"}}))
put("st_index", "wrong-shard", json.dumps({"weight_map": {"a": "model-00002-of-00002.safetensors"}}))
put("st_index", "missing-file", json.dumps({"weight_map": {"a": "nope.safetensors"}}))

# ---- config.json ------------------------------------------------------------
for model in ("llama-tiny", "bitnet-tiny"):
    with open(f"data/{model}/config.json") as f:
        put("config", model, f.read())
put("config", "minimal-top-theta", json.dumps({
    "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 100, "rms_norm_eps": 1e-6,
    "rope_theta": 500000.0, "hidden_act": "silu", "rope_scaling": None}))
# llama-tiny's config under each scaled RoPE of data/llama-tiny/rope.reference.json
with open("data/llama-tiny/config.json") as f:
    tiny = json.load(f)
with open("data/llama-tiny/rope.reference.json") as f:
    rope_variants = json.load(f)["variants"]
for v in ("llama3", "linear", "yarn_opts", "dynamic", "longrope_opts"):
    put("config", f"llama-tiny-rope-{v}", json.dumps(dict(tiny, rope_parameters=rope_variants[v]["rope_parameters"]),
                                                     indent=1))

# ---- tokens: byte 0 mode (even = list, odd = file), bytes 1-2 vocab-1 ------
V = struct.pack("<H", 2047)
put("tokens", "list", b"\x00" + V + b"1,2,3,2046,0")
put("tokens", "list-bad", b"\x00" + V + b"1,,2")
with open("data/wikitext2-test.tokens.i32", "rb") as f:
    put("tokens", "file-wikitext-64", b"\x01" + V + f.read(256))
put("tokens", "file-odd-size", b"\x01" + V + b"\x01\x00\x00\x00\x02")

# ---- QuantSpec ----------------------------------------------------------------
for i, s in enumerate(["rule=twn,group=128,scale=f16,act=f32", "rule=absmean,group=tensor",
                       "rule=l2opt,group=row,scale=fp8_e4m3,act=int8,layers=0-1+3",
                       "scale=e8m0,layers=attn", "rule=absmax,group=256,scale=bf16,layers=mlp",
                       "rule=std,group=32"]):
    put("quantspec", f"spec{i}", s)

# ---- KV policies (--kv) ------------------------------------------------------
for i, s in enumerate(["none", "encoder", "decoder", "all", "all@layers=0-1", "encoder@layers=2",
                       "decoder@layers=1-3"]):
    put("kvpolicy", f"policy{i}", s)

# ---- experiment configs --------------------------------------------------------
for fn in sorted(os.listdir("configs")):
    if fn.endswith(".conf"):
        with open(os.path.join("configs", fn)) as f:
            put("expconf", fn, f.read())


# ---- GGUF: the fixtures up to their data section (no weights) ---------------
def gguf_data_offset(b):
    p = 24
    n_t, n_kv = struct.unpack_from("<QQ", b, 8)
    align = 32

    def rstr(p):
        n = struct.unpack_from("<Q", b, p)[0]
        return b[p + 8:p + 8 + n], p + 8 + n

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def rval(t, p):
        if t == 8:
            return rstr(p)
        if t == 9:
            et, n = struct.unpack_from("<IQ", b, p)
            p += 12
            v = None
            for _ in range(n):
                v, p = rval(et, p)
            return v, p
        return b[p:p + sizes[t]], p + sizes[t]

    for _ in range(n_kv):
        k, p = rstr(p)
        t = struct.unpack_from("<I", b, p)[0]
        v, p = rval(t, p + 4)
        if k == b"general.alignment":
            align = struct.unpack("<I", v)[0]
    for _ in range(n_t):
        _, p = rstr(p)
        nd = struct.unpack_from("<I", b, p)[0]
        p += 4 + 8 * nd + 4 + 8
    return (p + align - 1) // align * align


for fn in ("llama-tiny-bf16.gguf", "llama-tiny-tq2_0.gguf"):
    with open(os.path.join("data/gguf", fn), "rb") as f:
        b = f.read()
    put("gguf", fn.replace(".gguf", "-header"), b[:gguf_data_offset(b)])


def gguf_tiny():
    """A whole small v3 file: a few KVs (string, u32, f32, string array) and
    one small tensor of every type the parser reads, data 32-byte aligned."""
    def s(x):
        return struct.pack("<Q", len(x)) + x

    kv = s(b"general.architecture") + struct.pack("<I", 8) + s(b"llama")
    kv += s(b"llama.block_count") + struct.pack("<II", 4, 2)
    kv += s(b"llama.rope.freq_base") + struct.pack("<If", 6, 10000.0)
    kv += s(b"tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2) + s(b"a") + s(b"bc")
    # (name, ggml type, ne fastest-first, data)
    tensors = [
        (b"f32", 0, [2, 3], struct.pack("<6f", 1, 2, 3, 4, 5, 6)),
        (b"f16", 1, [4], struct.pack("<4e", 1, -2, 0.5, 0)),
        (b"bf16", 30, [2], struct.pack("<2H", 0x3F80, 0xC000)),
        (b"q8_0", 8, [32], struct.pack("<e", 0.5) + bytes(range(32))),
        (b"tq2_0", 35, [256], bytes([0x66, 0x19, 0xA4, 0x55] * 16) + struct.pack("<e", 0.25)),
        (b"tq1_0", 34, [256], bytes([0, 81, 162, 243] * 13)[:52] + struct.pack("<e", 1.0)),
    ]
    ti, data = b"", b""
    for name, t, ne, d in tensors:
        data += bytes((-len(data)) % 32)
        ti += s(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
        ti += struct.pack("<IQ", t, len(data))
        data += d
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 4) + kv + ti
    head += bytes((-len(head)) % 32)
    return head + data


put("gguf", "tiny-valid", gguf_tiny())
