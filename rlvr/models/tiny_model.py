"""A small Llama with random weights and a real tokenizer's vocabulary and chat template: the model of the
integration tests and of benchmarks about the pipeline's mechanics (not about learning)."""

from __future__ import annotations

from pathlib import Path


def make_tiny_model(out_dir: str | Path, tokenizer_dir: str, hidden_size: int = 64, layers: int = 2,
                    seed: int = 0) -> str:
    import torch
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=1024, tie_word_embeddings=True,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id)
    out = Path(out_dir)
    LlamaForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    GenerationConfig(eos_token_id=[im_end, tokenizer.eos_token_id], pad_token_id=tokenizer.pad_token_id
                     ).save_pretrained(out)
    return str(out)
