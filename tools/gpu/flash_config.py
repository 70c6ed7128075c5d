#!/usr/bin/env python3
"""Writes a DeepSeek-V4-Flash config.json (model-spec §1.1) with a chosen number of layers, for GPU benchmarks of
the engine with random weights (`deepinfer generate --device cuda --random-weights --model DIR`): the full 43
layers do not fit one H200 next to the caches, so benchmarks run the first N layers of the official schedule.

Usage: python3 tools/gpu/flash_config.py --out DIR [--layers 16]
"""
import argparse
import json
import os


def flash_config(layers: int) -> dict:
    ratios = ([0, 0] + [4, 128] * 21)[:layers]  # compress_ratios [0, 0] + [4, 128] * 20 + [4] (+ MTP 0)
    return {
        "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "vocab_size": 129280,
        "hidden_size": 4096, "num_hidden_layers": layers, "num_attention_heads": 64, "num_key_value_heads": 1,
        "head_dim": 512, "qk_rope_head_dim": 64, "q_lora_rank": 1024, "o_lora_rank": 1024, "o_groups": 8,
        "n_routed_experts": 256, "num_experts_per_tok": 6, "n_shared_experts": 1, "moe_intermediate_size": 2048,
        "num_hash_layers": 3, "scoring_func": "sqrtsoftplus", "topk_method": "noaux_tc", "norm_topk_prob": True,
        "routed_scaling_factor": 1.5, "swiglu_limit": 10.0, "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6,
        "rms_norm_eps": 1e-6, "sliding_window": 128, "rope_theta": 10000.0, "compress_rope_theta": 160000.0,
        "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536, "beta_fast": 32,
                         "beta_slow": 1},
        "compress_ratios": ratios, "index_n_heads": 64, "index_head_dim": 128, "index_topk": 512,
        "max_position_embeddings": 1048576, "num_nextn_predict_layers": 0, "bos_token_id": 0, "eos_token_id": 1,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "expert_dtype": "fp4",
        "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                "scale_fmt": "ue8m0", "weight_block_size": [128, 128]},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=16)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(flash_config(args.layers), f, indent=2)
    print(f"V4-Flash config with {args.layers} layers in {args.out}")


if __name__ == "__main__":
    main()
