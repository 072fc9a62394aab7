#!/usr/bin/env python3
"""Build a tiny random MoE model with HF transformers, convert it to GGUF with the PyPI `gguf`
package, and record transformers' logits and greedy continuations as moeplan's parity fixture.

Five architectures: `qwen3moe` (Qwen3MoeForCausalLM: q/k norms, no attention biases, renormalized
top-k), `qwen2moe` (Qwen2MoeForCausalLM, the Qwen1.5-MoE layout: Q/K/V biases, top-k weights not
renormalized, a shared expert behind a sigmoid gate), `olmoe` (OlmoeForCausalLM: q/k norms over all
heads), `mixtral` (MixtralForCausalLM, written as llama.cpp's converter writes it: architecture
"llama", Q and K permuted for RoPE on interleaved pairs) and `gpt-oss` (GptOssForCausalLM: attention
sinks, a sliding window on even layers, biases on every projection, router and expert, the clamped
SwiGLU, YaRN RoPE; gate and up de-interleaved as llama.cpp's converter does).

Neither transformers nor the gguf package is moeplan code: the fixture checks moeplan's loader
and forward pass against references nobody here wrote. Needs torch, transformers and the gguf
package (on the GPU machine torch and transformers are there and the gguf wheel travels in .whl/;
any machine with the three installed works). CPU float32 is used for the reference so the numbers
do not depend on GPU kernels.

Usage: tools/hf_reference.py OUT_DIR [qwen3moe|qwen2moe|olmoe|mixtral|gpt-oss]   (default qwen3moe)
Writes OUT_DIR/ARCH-tiny-f32.gguf and OUT_DIR/ARCH-tiny-expected.bin (format in
tests/fixtures/hf/README.md) and prints a summary.
"""
import struct
import sys
from typing import Callable, NamedTuple

import numpy as np
import torch
import transformers

import gguf

SEED = 1234
VOCAB = 320          # 256 byte tokens + 3 specials + padding
N_CONTINUE = 32
PROMPTS = [
    "Mixture of experts routes each token.",
    "The quick brown fox jumps over the lazy dog",
    "def forward(x):\n    return x * 2\n",
    "12345 + 67890 = ?",
    "Experts on the GPU, the rest in host RAM.",
]


def byte_level_table():
    """GPT-2's byte <-> printable-unicode map (the published byte-level BPE convention)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars = keep[:]
    n = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(keep, chars)}


# ---------------------------------------------------------------------------------------------
# Per-architecture pieces: the HF model, the arch-specific GGUF keys, the arch-specific tensors.

def qwen3moe_model():
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    cfg = Qwen3MoeConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, moe_intermediate_size=48,
        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
        mlp_only_layers=[], rms_norm_eps=1e-6, max_position_embeddings=256,
        tie_word_embeddings=False, rope_theta=1000000.0, attention_bias=False,
    )
    return cfg, Qwen3MoeForCausalLM(cfg)


def qwen2moe_model():
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM
    cfg = Qwen2MoeConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, moe_intermediate_size=48,
        shared_expert_intermediate_size=96,
        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        num_experts=8, num_experts_per_tok=2, norm_topk_prob=False, decoder_sparse_step=1,
        mlp_only_layers=[], rms_norm_eps=1e-6, max_position_embeddings=256,
        tie_word_embeddings=False, rope_theta=1000000.0, qkv_bias=True,
        use_sliding_window=False,
    )
    return cfg, Qwen2MoeForCausalLM(cfg)


def olmoe_model():
    from transformers import OlmoeConfig, OlmoeForCausalLM
    cfg = OlmoeConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=48, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4, num_experts=8, num_experts_per_tok=2,
        norm_topk_prob=False, rms_norm_eps=1e-5, max_position_embeddings=256,
        tie_word_embeddings=False, rope_theta=10000.0, clip_qkv=None, pad_token_id=0,
        bos_token_id=256, eos_token_id=258,
    )
    return cfg, OlmoeForCausalLM(cfg)


def mixtral_model():
    from transformers import MixtralConfig, MixtralForCausalLM
    cfg = MixtralConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=48, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=8,
        num_experts_per_tok=2, rms_norm_eps=1e-5, max_position_embeddings=256,
        tie_word_embeddings=False, rope_theta=1000000.0, sliding_window=None,
    )
    return cfg, MixtralForCausalLM(cfg)


# gpt-oss's YaRN: factor and original context as the released checkpoints (4096 x 32 = 131072,
# the context_length); the correction range of a 16-dimension head at theta 150000 is then
# dimensions 2.02 .. 4.35 of the 8 rotated pairs, inside them and not on whole numbers, so that
# both the ramp and "truncate": false (no rounding out to 2 .. 5) show in the logits.
GPTOSS_YARN_FACTOR = 32.0
GPTOSS_YARN_ORIG_CTX = 4096


def gptoss_model():
    from transformers import GptOssConfig, GptOssForCausalLM
    cfg = GptOssConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=48, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=8,
        num_experts_per_tok=4, rms_norm_eps=1e-5,
        max_position_embeddings=int(GPTOSS_YARN_ORIG_CTX * GPTOSS_YARN_FACTOR),
        tie_word_embeddings=False, attention_bias=True,
        # a window shorter than every prompt; layer_types left to the config: even layers slide
        sliding_window=4,
        rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": GPTOSS_YARN_FACTOR,
                         "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                         "original_max_position_embeddings": GPTOSS_YARN_ORIG_CTX},
        # the plain PyTorch paths: eager attention (the one that adds the sinks in the softmax
        # here) and the per-expert loop, not grouped_mm or a hub kernel
        attn_implementation="eager", experts_implementation="eager",
        pad_token_id=0, bos_token_id=256, eos_token_id=258,
    )
    model = GptOssForCausalLM(cfg)
    impl = (model.config._attn_implementation, model.config._experts_implementation)
    assert impl == ("eager", "eager"), f"transformers chose attention/experts {impl}, not eager"
    return cfg, model


def gptoss_init(model):
    """gpt-oss's own parameters, after build_model's generic widening (which would take the
    transposed expert stacks' last dimension for the fan-in, and the sinks' n_head): sinks of order one
    (each head's sink then takes a sizable, varying share of its softmax), the experts at a scale
    where some gate and up values pass the SwiGLU clamp (7), biases that move routing and outputs."""
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.sinks.normal_(0.0, 1.0)
            layer.mlp.router.bias.normal_(0.0, 0.5)
            experts = layer.mlp.experts
            experts.gate_up_proj.normal_(0.0, 3.0 / experts.gate_up_proj.shape[1] ** 0.5)  # (E, hidden, 2F)
            experts.gate_up_proj_bias.normal_(0.0, 1.0)
            experts.down_proj.normal_(0.0, 0.5 / experts.down_proj.shape[1] ** 0.5)  # (E, F, hidden)
            experts.down_proj_bias.normal_(0.0, 0.3)


def qwen3moe_kv(w, cfg):
    pass


def qwen2moe_kv(w, cfg):
    w.add_expert_shared_feed_forward_length(cfg.shared_expert_intermediate_size)


def mixtral_kv(w, cfg):
    # llama.cpp's converter writes the rotary dimension for "llama" files (the whole head here)
    w.add_rope_dimension_count(head_dim(cfg))


def gptoss_kv(w, cfg):
    # as llama.cpp's GptOssModel and TextModel.set_gguf_parameters write them
    rp = cfg.rope_parameters
    w.add_sliding_window(cfg.sliding_window)
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(rp["factor"])
    w.add_rope_scaling_orig_ctx_len(rp["original_max_position_embeddings"])
    w.add_rope_scaling_yarn_beta_fast(rp["beta_fast"])
    w.add_rope_scaling_yarn_beta_slow(rp["beta_slow"])


def no_tensors(t, sd, i, p):
    pass


def qwen3moe_attn_tensors(t, sd, i, p):
    t(f"blk.{i}.attn_q_norm.weight", sd[p + "self_attn.q_norm.weight"])
    t(f"blk.{i}.attn_k_norm.weight", sd[p + "self_attn.k_norm.weight"])


def qwen2moe_attn_tensors(t, sd, i, p):
    t(f"blk.{i}.attn_q.bias", sd[p + "self_attn.q_proj.bias"])
    t(f"blk.{i}.attn_k.bias", sd[p + "self_attn.k_proj.bias"])
    t(f"blk.{i}.attn_v.bias", sd[p + "self_attn.v_proj.bias"])


def qwen3moe_ffn_tensors(t, sd, i, p):
    pass


def qwen2moe_ffn_tensors(t, sd, i, p):
    # HF shared_expert_gate is Linear(hidden, 1): weight (1, hidden) -> 1-D, GGUF ne = [hidden]
    t(f"blk.{i}.ffn_gate_inp_shexp.weight", sd[p + "mlp.shared_expert_gate.weight"].reshape(-1))
    t(f"blk.{i}.ffn_gate_shexp.weight", sd[p + "mlp.shared_expert.gate_proj.weight"])
    t(f"blk.{i}.ffn_up_shexp.weight", sd[p + "mlp.shared_expert.up_proj.weight"])
    t(f"blk.{i}.ffn_down_shexp.weight", sd[p + "mlp.shared_expert.down_proj.weight"])


def gptoss_attn_tensors(t, sd, i, p):
    t(f"blk.{i}.attn_q.bias", sd[p + "self_attn.q_proj.bias"])
    t(f"blk.{i}.attn_k.bias", sd[p + "self_attn.k_proj.bias"])
    t(f"blk.{i}.attn_v.bias", sd[p + "self_attn.v_proj.bias"])
    t(f"blk.{i}.attn_output.bias", sd[p + "self_attn.o_proj.bias"])
    t(f"blk.{i}.attn_sinks.weight", sd[p + "self_attn.sinks"])  # (n_head)


def gptoss_ffn_tensors(t, sd, i, p):
    t(f"blk.{i}.ffn_gate_inp.bias", sd[p + "mlp.router.bias"])  # (E)
    # gate_up_proj_bias (E, 2F) interleaves gate and up as gate_up_proj does: numpy (E, F) each,
    # GGUF ne = [F, E]; down_proj_bias (E, hidden), ne = [hidden, E]
    gu_b = sd[p + "mlp.experts.gate_up_proj_bias"]
    t(f"blk.{i}.ffn_gate_exps.bias", gu_b[:, 0::2])
    t(f"blk.{i}.ffn_up_exps.bias", gu_b[:, 1::2])
    t(f"blk.{i}.ffn_down_exps.bias", sd[p + "mlp.experts.down_proj_bias"])


class Arch(NamedTuple):
    model: Callable            # () -> (config, model)
    kv: Callable               # (writer, config): the architecture's own GGUF keys
    attn_tensors: Callable     # (t, sd, layer, prefix): its extra attention tensors
    ffn_tensors: Callable      # (t, sd, layer, prefix): its extra FFN tensors
    gguf_arch: str             # general.architecture
    # Q and K permuted as llama.cpp's converter does for "llama" files (its RoPE rotates
    # interleaved pairs where transformers rotates halves)
    permute_qk: bool
    norm_key: str | None       # config field for the top-k renormalization key (None: no key)
    init: Callable | None = None         # (model): parameters the generic widening does not suit
    ffn_norm: str = "ffn_norm"           # GGUF name of the pre-MoE norm
    router: str = "mlp.gate"             # HF module of the router
    gate_up_interleaved: bool = False    # fused gate_up alternates gate and up columns


ARCHS = {
    "qwen3moe": Arch(qwen3moe_model, qwen3moe_kv, qwen3moe_attn_tensors, qwen3moe_ffn_tensors, "qwen3moe", False,
                     "norm_topk_prob"),
    "qwen2moe": Arch(qwen2moe_model, qwen2moe_kv, qwen2moe_attn_tensors, qwen2moe_ffn_tensors, "qwen2moe", False,
                     "norm_topk_prob"),
    # OLMoE normalizes the whole q and k vectors (q_norm of n_head * head_dim)
    "olmoe": Arch(olmoe_model, qwen3moe_kv, qwen3moe_attn_tensors, no_tensors, "olmoe", False, "norm_topk_prob"),
    # Mixtral as llama.cpp's converter writes it: architecture "llama" with expert keys and
    # rope.dimension_count, Q/K permuted, no renormalization key (top-k softmax, renormalized, is
    # Mixtral's rule and moeplan's default)
    "mixtral": Arch(mixtral_model, mixtral_kv, no_tensors, no_tensors, "llama", True, None),
    # gpt-oss as llama.cpp's converter writes it: the pre-MoE norm is post_attention_norm, no
    # renormalization key (softmax over the k chosen logits is the renormalized top-k), gate and up
    # de-interleaved and, like down, transposed to (out, in)
    "gpt-oss": Arch(gptoss_model, gptoss_kv, gptoss_attn_tensors, gptoss_ffn_tensors, "gpt-oss", False, None,
                    init=gptoss_init, ffn_norm="post_attention_norm", router="mlp.router",
                    gate_up_interleaved=True),
}


def n_experts(cfg):
    return getattr(cfg, "num_local_experts", None) or cfg.num_experts


def expert_ffn(cfg):
    return getattr(cfg, "moe_intermediate_size", None) or cfg.intermediate_size


def head_dim(cfg):
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


def permute_qk(w, n_head):
    """llama.cpp's convert_hf_to_gguf permutation of a Q or K projection (rows grouped per head as
    (2, head_dim/2) -> (head_dim/2, 2)), so that interleaved-pair RoPE equals transformers' halves."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# ---------------------------------------------------------------------------------------------
# Shared pieces.

def build_model(arch):
    torch.manual_seed(SEED)
    cfg, model = ARCHS[arch].model()
    model = model.eval().float()
    # transformers initializes with std 0.02 (and zero biases), which makes logits nearly flat;
    # widen the weights so that greedy decoding and routing are decisive (ties would make the
    # comparison meaningless).
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.normal_(0.0, 0.3)
            else:
                p.normal_(0.0, 0.25 if "embed" in name else 1.0 / (p.shape[-1] ** 0.5))
    if ARCHS[arch].init:
        ARCHS[arch].init(model)
    return cfg, model


def expert_stacks(sd, cfg, p, interleaved):
    """(gate, up, down) as numpy (E, out, in), from the fused transformers-5 layout or per-expert
    linears. interleaved: gate_up_proj alternates gate and up (gpt-oss: gate = [..., ::2],
    up = [..., 1::2]) instead of holding all gate rows first."""
    F = expert_ffn(cfg)
    E = n_experts(cfg)
    if p + "mlp.experts.gate_up_proj" in sd:  # transformers 5: fused per layer
        gu = sd[p + "mlp.experts.gate_up_proj"]
        down = sd[p + "mlp.experts.down_proj"]
        gate_cols, up_cols = (slice(0, None, 2), slice(1, None, 2)) if interleaved else (slice(0, F), slice(F, None))
        if gu.shape == (E, 2 * F, cfg.hidden_size):
            gate, up = gu[:, gate_cols, :], gu[:, up_cols, :]
        elif gu.shape == (E, cfg.hidden_size, 2 * F):
            gate, up = gu[:, :, gate_cols].transpose(0, 2, 1), gu[:, :, up_cols].transpose(0, 2, 1)
        else:
            raise SystemExit(f"unexpected gate_up_proj shape {gu.shape}")
        if down.shape == (E, cfg.hidden_size, F):
            pass
        elif down.shape == (E, F, cfg.hidden_size):
            down = down.transpose(0, 2, 1)
        else:
            raise SystemExit(f"unexpected down_proj shape {down.shape}")
    else:  # per-expert linears
        gate = np.stack([sd[p + f"mlp.experts.{e}.gate_proj.weight"] for e in range(E)])
        up = np.stack([sd[p + f"mlp.experts.{e}.up_proj.weight"] for e in range(E)])
        down = np.stack([sd[p + f"mlp.experts.{e}.down_proj.weight"] for e in range(E)])
    return gate, up, down


def add_vocab(w):
    """Byte-level vocabulary without merges: every byte is a token, then the specials, then
    padding."""
    table = byte_level_table()
    tokens = [table[b] for b in range(256)] + ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    types = [1] * 256 + [3, 3, 3]
    while len(tokens) < VOCAB:
        tokens.append(f"[PAD{len(tokens)}]")
        types.append(5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([])
    w.add_bos_token_id(256)
    w.add_eos_token_id(258)
    w.add_add_bos_token(False)


def write_gguf(arch, cfg, sd, path):
    spec = ARCHS[arch]
    gguf_arch = spec.gguf_arch
    rope = getattr(cfg, "rope_theta", None)
    if rope is None:
        rope = cfg.rope_parameters["rope_theta"]

    w = gguf.GGUFWriter(path, gguf_arch)
    w.add_name(f"hf-reference-{arch}-tiny")
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(head_dim(cfg))
    w.add_value_length(head_dim(cfg))
    w.add_rope_freq_base(float(rope))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_expert_count(n_experts(cfg))
    w.add_expert_used_count(cfg.num_experts_per_tok)
    w.add_expert_feed_forward_length(expert_ffn(cfg))
    spec.kv(w, cfg)
    if spec.norm_key:
        w.add_bool(f"{gguf_arch}.expert_weights_norm", bool(getattr(cfg, spec.norm_key)))
    w.add_file_type(0)
    add_vocab(w)

    def t(name, arr):
        w.add_tensor(name, np.ascontiguousarray(arr, dtype=np.float32))

    t("token_embd.weight", sd["model.embed_tokens.weight"])
    t("output_norm.weight", sd["model.norm.weight"])
    t("output.weight", sd["lm_head.weight"])
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        t(f"blk.{i}.attn_norm.weight", sd[p + "input_layernorm.weight"])
        q, k = sd[p + "self_attn.q_proj.weight"], sd[p + "self_attn.k_proj.weight"]
        if spec.permute_qk:
            q, k = permute_qk(q, cfg.num_attention_heads), permute_qk(k, cfg.num_key_value_heads)
        t(f"blk.{i}.attn_q.weight", q)
        t(f"blk.{i}.attn_k.weight", k)
        t(f"blk.{i}.attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        t(f"blk.{i}.attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        spec.attn_tensors(t, sd, i, p)
        t(f"blk.{i}.{spec.ffn_norm}.weight", sd[p + "post_attention_layernorm.weight"])
        t(f"blk.{i}.ffn_gate_inp.weight", sd[p + spec.router + ".weight"])
        gate, up, down = expert_stacks(sd, cfg, p, spec.gate_up_interleaved)
        # numpy (E, out, in) is GGUF ne = [in, out, E], as llama.cpp stores *_exps
        t(f"blk.{i}.ffn_gate_exps.weight", gate)
        t(f"blk.{i}.ffn_up_exps.weight", up)
        t(f"blk.{i}.ffn_down_exps.weight", down)
        spec.ffn_tensors(t, sd, i, p)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_expected(model, path):
    """Reference outputs: full-sequence logits for each prompt, then greedy continuation."""
    exp = open(path, "wb")
    exp.write(b"MPHF" + struct.pack("<III", 1, len(PROMPTS), VOCAB))
    with torch.no_grad():
        for text in PROMPTS:
            ids = list(text.encode("utf-8"))
            logits = model(torch.tensor([ids])).logits[0].float().numpy()  # (n, vocab)
            gen = model.generate(torch.tensor([ids]), max_new_tokens=N_CONTINUE, do_sample=False,
                                 min_new_tokens=N_CONTINUE, eos_token_id=None, pad_token_id=0)
            cont = gen[0, len(ids):].tolist()
            assert len(cont) == N_CONTINUE, len(cont)
            exp.write(struct.pack("<II", len(ids), N_CONTINUE))
            exp.write(np.asarray(ids, dtype="<i4").tobytes())
            exp.write(np.ascontiguousarray(logits, dtype="<f4").tobytes())
            exp.write(np.asarray(cont, dtype="<i4").tobytes())
            top2 = np.sort(logits[-1])[-2:]
            # decisiveness of every greedy step: top-2 gap of the rows that chose the continuation
            # (one full-sequence forward over prompt + continuation; not written to the fixture)
            full = model(torch.tensor([ids + cont])).logits[0].float().numpy()
            rows = full[len(ids) - 1:len(ids) - 1 + N_CONTINUE]
            srt = np.sort(rows, axis=-1)
            step_gaps = srt[:, -1] - srt[:, -2]
            assert (rows.argmax(-1) == np.asarray(cont)).all(), "continuation is not the argmax"
            print(f"prompt {text!r}: {len(ids)} tokens, last-row logit range "
                  f"[{logits[-1].min():.3f}, {logits[-1].max():.3f}], top-2 gap {top2[1]-top2[0]:.4f}, "
                  f"min top-2 gap over the {N_CONTINUE} greedy steps {step_gaps.min():.4f}, "
                  f"continuation {cont[:8]}...")
    exp.close()


def main():
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] not in ARCHS):
        raise SystemExit(f"usage: {sys.argv[0]} OUT_DIR [{'|'.join(ARCHS)}]")
    out_dir = sys.argv[1]
    arch = sys.argv[2] if len(sys.argv) == 3 else "qwen3moe"

    cfg, model = build_model(arch)
    sd = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    for k, v in sd.items():
        print(f"  {k}: {tuple(v.shape)}")

    path = f"{out_dir}/{arch}-tiny-f32.gguf"
    write_gguf(arch, cfg, sd, path)
    write_expected(model, f"{out_dir}/{arch}-tiny-expected.bin")
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, gguf wrote {path}")


if __name__ == "__main__":
    main()
