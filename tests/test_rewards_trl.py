"""The reward functions plug into TRL's GRPOTrainer unchanged (one step on a tiny local model).

No download: the tokenizer is a character-level WordLevel model built here and the model is a
tiny Qwen2 built from a config. Skipped when TRL (the dev extra) is not installed.
"""

from __future__ import annotations

import pytest

pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers  # noqa: E402
from transformers import (  # noqa: E402
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from grpo_minimal.rewards import accuracy_reward, format_reward  # noqa: E402

CHARS = "0123456789+-*=/<>. abdehiknrstw"


def char_tokenizer(path) -> PreTrainedTokenizerFast:
    """A character-level tokenizer saved to ``path`` and loaded back (as a learner would)."""
    specials = ["<pad>", "<eos>", "<unk>"]
    vocab = {token: i for i, token in enumerate(specials + list(CHARS))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )
    fast.save_pretrained(path)
    return PreTrainedTokenizerFast.from_pretrained(path)


def test_grpo_trainer_runs_one_step_with_our_rewards(tmp_path):
    tokenizer = char_tokenizer(tmp_path / "tokenizer")
    assert tokenizer.decode(tokenizer("23+45=68")["input_ids"]) == "23+45=68"
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    model = Qwen2ForCausalLM(config)
    train = datasets.Dataset.from_list(
        [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a, b in [(12, 34), (40, 2), (7, 8)]]
    )
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        bf16=False,
        max_steps=1,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        seed=0,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[accuracy_reward, format_reward],
        args=args,
        train_dataset=train,
        processing_class=tokenizer,
    )
    trainer.train()

    assert trainer.state.global_step == 1
    logged = {key for entry in trainer.state.log_history for key in entry}
    assert "rewards/accuracy_reward/mean" in logged
    assert "rewards/format_reward/mean" in logged
    means = [e["reward"] for e in trainer.state.log_history if "reward" in e]
    assert means and all(0.0 <= m <= 2.0 for m in means)
