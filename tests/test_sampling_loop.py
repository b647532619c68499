"""Step 1's two samplers make the same draws: ``sample_with_kv_cache`` (the loop over the model's
own key/value cache) against one batched ``model.generate`` call.

Same tokens, same completions and the same state of torch's random generator afterwards, from
the same sampling distributions (every probability vector handed to ``torch.multinomial``): the
loop calls the generator as transformers' ``_sample`` does, on the same logits. Bit for bit at
every token after the first; the first token's logits come from the prompt pass, which the loop
runs over the P prompts and ``generate`` over the P * G rows, and a matmul over another number
of rows may round differently (on the stand-in in float32 the logits differ by up to 2.4e-6 and
the probabilities by 3e-10), so that one distribution is compared up to the rounding of the
compute dtype. On the course's two small models (the tiny arithmetic model; the stand-in, whose
two end tokens include its pad token), with and without left padding, temperature 1 and 0.7,
top-p 1 and 0.9, in float32 and under bfloat16 autocast (``--dtype bfloat16`` on a CPU). A
changed draw would change every committed result that trains the model (notebooks 06-08,
``bench/results/``). Also: which models the trainer lets the loop drive, a right-padding
tokenizer, an unknown ``sampler``. CPU only, a few seconds, no timing asserted.
"""

from __future__ import annotations

import copy
import functools

import pytest
import torch

from grpo_minimal import completions
from grpo_minimal.completions import (
    SAMPLERS,
    output_cache,
    sample_completions,
    sample_with_kv_cache,
    uses_sampling_loop,
)
from grpo_minimal.data import DATA_DIR, load_math_rows, load_shapes
from grpo_minimal.lm_grpo import LMGRPOTrainer
from grpo_minimal.lm_model import format_prompt, load_model
from grpo_minimal.math_config import MathConfig

SEEDS = (0, 1, 2)
SETTINGS = [(1.0, 1.0), (0.7, 1.0), (1.0, 0.9), (0.7, 0.9)]  # (temperature, top_p)
# the same length (generate then passes no attention mask), or left padding of 0-3 tokens
TINY_PROMPTS = {
    "equal": ["23+45=", "10+17=", "99+99=", "48-15="],
    "padded": ["23+45=", "10+7=", "5+6=", "123+456="],
}
STANDIN_QUESTIONS = ["What is 3 + 4?", "Tom has 12 apples and eats 5. How many are left?"]


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny", torch.device("cpu"))


@pytest.fixture(scope="module")
def standin():
    return load_model(str(DATA_DIR / "standin_lm"), torch.device("cpu"))


def draw_both(model, tokenizer, prompts, seed, rows=None, **settings):
    """The same draw through each sampler, from the same seed: (rollout, the generator's state
    after, the probabilities each call of ``torch.multinomial`` drew from). ``rows`` carry a
    vision-language model's pictures."""
    out = {}
    multinomial = torch.multinomial
    for sampler in ("generate", "loop"):
        seen = []

        def spy(probs, *args, seen=seen, **kwargs):
            seen.append(probs.clone())
            return multinomial(probs, *args, **kwargs)

        torch.manual_seed(seed)
        torch.multinomial = spy
        try:
            rollout = sample_completions(
                model, tokenizer, rows or [{}] * len(prompts), prompts, sampler=sampler, **settings
            )
        finally:
            torch.multinomial = multinomial
        out[sampler] = rollout, torch.get_rng_state(), seen
    return out["generate"], out["loop"]


def assert_same_draws(a, b, dtype=torch.float32):
    """The same draws, from the same distributions: bit for bit after the first token, the first
    (from the prompt pass over P or P * G rows) up to torch's default tolerance for ``dtype``,
    the precision the logits were computed in."""
    (ga, state_a, probs_a), (gb, state_b, probs_b) = a, b
    assert ga.completion_ids.shape == gb.completion_ids.shape
    assert torch.equal(ga.completion_ids, gb.completion_ids)
    assert torch.equal(ga.completion_mask, gb.completion_mask)
    assert ga.completions == gb.completions
    assert torch.equal(state_a, state_b)  # the generator was called the same way
    assert len(probs_a) == len(probs_b)
    if probs_a:
        rtol = {torch.float32: 1.3e-6, torch.bfloat16: 1.6e-2}[dtype]  # torch's defaults
        torch.testing.assert_close(probs_a[0], probs_b[0], rtol=rtol, atol=1e-5)
    assert all(torch.equal(p, q) for p, q in zip(probs_a[1:], probs_b[1:], strict=True))


@pytest.mark.parametrize("temperature, top_p", SETTINGS)
@pytest.mark.parametrize("padding", sorted(TINY_PROMPTS))
def test_the_loop_draws_what_generate_draws_on_the_tiny_model(tiny, padding, temperature, top_p):
    model, tokenizer = tiny
    prompts = TINY_PROMPTS[padding]
    enc = tokenizer(prompts, padding=True, return_tensors="pt", add_special_tokens=False)
    assert bool(enc["attention_mask"].all()) == (padding == "equal")
    for seed in SEEDS:
        generated, looped = draw_both(
            model,
            tokenizer,
            prompts,
            seed,
            num_generations=8,
            max_new_tokens=5,
            temperature=temperature,
            top_p=top_p,
        )
        assert_same_draws(generated, looped)
        ended = looped[0].completion_mask.sum(1) < looped[0].completion_ids.shape[1]
        assert ended.any()  # some rows ended early and were padded after their EOS


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_the_loop_draws_what_generate_draws_on_the_standin(standin, temperature, top_p):
    """A BPE tokenizer, chat prompts of different lengths, two end tokens (one is the pad)."""
    model, tokenizer = standin
    prompts = [format_prompt(q, tokenizer, "r1") for q in STANDIN_QUESTIONS]
    for seed in SEEDS:
        generated, looped = draw_both(
            model,
            tokenizer,
            prompts,
            seed,
            num_generations=4,
            max_new_tokens=12,
            temperature=temperature,
            top_p=top_p,
        )
        assert_same_draws(generated, looped)


@pytest.mark.parametrize(
    "model_name, question, settings",
    [  # notebook 13's LLaVA (it reads digits), and the GPU road's Idefics3 (SmolVLM's classes)
        ("tiny-vlm", "12+", dict(num_generations=4, max_new_tokens=2)),
        ("data/standin_vlm", "How many shapes?", dict(num_generations=3, max_new_tokens=6)),
    ],
)
def test_the_loop_draws_what_generate_draws_on_a_vision_language_model(
    model_name, question, settings
):
    """The picture enters the prompt pass only (its features then live in the cache) and
    ``<image>`` is masked before the temperature, as ``generate``'s ``suppress_tokens`` does.
    One prompt is longer (left padding); for the Idefics3, one picture is twice as wide (fewer
    tiles: its processor pads ``pixel_values`` with blank tiles)."""
    model, processor = load_model(model_name, torch.device("cpu"))
    assert uses_sampling_loop(model)
    rows = load_shapes("validation")[:4]
    rows[1] = {**rows[1], "prompt": question}
    if model_name != "tiny-vlm":  # the tiny one takes 32x32 pictures only
        rows[2] = {**rows[2], "image": rows[2]["image"].resize((64, 32))}
    prompts = [format_prompt(r["prompt"], processor, "plain") for r in rows]
    for seed in SEEDS:
        assert_same_draws(*draw_both(model, processor, prompts, seed, rows=rows, **settings))


@pytest.mark.parametrize("model_name", ["tiny", "standin"])
def test_the_loop_draws_what_generate_draws_under_bf16_autocast(request, model_name):
    """Under bfloat16 autocast (``--dtype bfloat16`` on a CPU) the same identity holds: the same
    draws, from distributions equal bit for bit after the first token (the same bf16 matmuls on
    the same rows; both samplers cast the bf16 logits to float32 before the softmax), the first
    up to bf16 rounding (here it was exact too). Sampling from the bf16 scores themselves would
    move every distribution by about bf16's resolution and fail this, not the float32 tests."""
    model, tokenizer = request.getfixturevalue(model_name)
    if model_name == "tiny":
        prompts, settings = TINY_PROMPTS["padded"], {"num_generations": 8, "max_new_tokens": 5}
    else:
        prompts = [format_prompt(q, tokenizer, "r1") for q in STANDIN_QUESTIONS]
        settings = {"num_generations": 4, "max_new_tokens": 12}
    for seed, (temperature, top_p) in enumerate([(1.0, 1.0), (0.7, 0.9)]):
        amp = torch.autocast("cpu", dtype=torch.bfloat16)
        generated, looped = draw_both(
            model,
            tokenizer,
            prompts,
            seed,
            temperature=temperature,
            top_p=top_p,
            amp=amp,
            **settings,
        )
        assert_same_draws(generated, looped, torch.bfloat16)
        assert generated[2] and generated[2][0].dtype == torch.float32


def test_greedy_decoding_is_the_same_too(tiny):
    model, tokenizer = tiny
    generated, looped = draw_both(
        model,
        tokenizer,
        TINY_PROMPTS["padded"],
        0,
        num_generations=1,
        max_new_tokens=5,
        do_sample=False,
    )
    assert_same_draws(generated, looped)


def test_finished_rows_pad_and_the_loop_stops_when_all_have_ended(tiny):
    """Raw tokens of the loop: after a row's first EOS only the pad token; no step past the one
    where the last row ended; never more than ``max_new_tokens``."""
    model, tokenizer = tiny
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    assert eos != pad  # otherwise padding could not be told from an EOS
    enc = tokenizer(
        TINY_PROMPTS["padded"], padding=True, return_tensors="pt", add_special_tokens=False
    )

    def draw(seed, max_new_tokens):
        torch.manual_seed(seed)
        return sample_with_kv_cache(
            model,
            enc["input_ids"],
            enc["attention_mask"],
            8,
            max_new_tokens=max_new_tokens,
            temperature=1.0,
            top_p=1.0,
            do_sample=True,
            pad_id=pad,
            eos_ids=[eos],
        )

    stopped_early = False
    for seed in range(6):
        tokens = draw(seed, 6)
        assert tokens.shape[0] == 32 and tokens.shape[1] <= 6
        is_eos = tokens == eos
        first = torch.where(is_eos.any(1), is_eos.int().argmax(1), tokens.shape[1])
        after = torch.arange(tokens.shape[1]) > first[:, None]
        assert after.any() and (tokens[after] == pad).all()
        if tokens.shape[1] < 6:  # stopped early: every row had ended, the last one just now
            stopped_early = True
            assert is_eos.any(1).all() and first.max() == tokens.shape[1] - 1
    assert stopped_early
    one = draw(0, 1)  # the limit: rows that have not ended are cut
    assert one.shape == (32, 1) and (one != eos).any()


def test_the_trainer_samples_through_the_loop_only_for_small_models_on_the_cpu(tiny, monkeypatch):
    model, tokenizer = tiny
    assert uses_sampling_loop(model)
    cfg = MathConfig(device="cpu", prompts_per_step=2, num_generations=4, max_steps=2)
    assert LMGRPOTrainer(cfg, model, tokenizer).sampler == "loop"
    monkeypatch.setattr(completions, "SAMPLING_LOOP_MAX_PARAMETERS", 1000)  # a "real" model
    assert not uses_sampling_loop(model)
    assert LMGRPOTrainer(cfg, model, tokenizer).sampler == "generate"


def variant(tiny, forward):
    """A model of the tiny model's class and config (fresh weights) whose forward is ``forward``."""
    return type("Variant", (type(tiny[0]),), {"forward": forward})(tiny[0].config).eval()


def test_the_loop_is_chosen_only_for_a_model_it_can_drive(tiny):
    """Small and on the CPU is not enough: the loop also needs a decoder-only model whose
    forward names position_ids, logits_to_keep and the cache, and returns a cache that
    ``batch_repeat_interleave``s. Any other small model samples through ``generate``."""
    from transformers import MambaConfig, MambaForCausalLM, T5Config, T5ForConditionalGeneration

    base = type(tiny[0])

    def hidden(self, input_ids, attention_mask=None, **kwargs):  # the arguments in **kwargs
        return base.forward(self, input_ids, attention_mask=attention_mask, **kwargs)

    @functools.wraps(base.forward)
    def legacy(self, *args, **kwargs):  # a cache without batch_repeat_interleave
        out = base.forward(self, *args, **kwargs)
        layers = output_cache(out).layers  # as the legacy tuple of (keys, values) per layer
        out["cache" if "cache" in out else "past_key_values"] = tuple(
            (layer.keys, layer.values) for layer in layers
        )
        return out

    t5 = T5ForConditionalGeneration(
        T5Config(vocab_size=32, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2)
    )
    mamba = MambaForCausalLM(
        MambaConfig(vocab_size=32, hidden_size=16, num_hidden_layers=2, state_size=4)
    )
    others = {
        "encoder-decoder": t5,
        "recurrent": mamba,
        "arguments in **kwargs": variant(tiny, hidden),
        "legacy cache": variant(tiny, legacy),
    }
    assert {name: uses_sampling_loop(m) for name, m in others.items()} == dict.fromkeys(
        others, False
    )
    model, was_training = tiny[0], tiny[0].training
    model.train()  # the probe: in eval mode, no random numbers, the mode restored
    state = torch.get_rng_state()
    try:
        assert uses_sampling_loop(model) and model.training
    finally:
        model.train(was_training)
    assert torch.equal(torch.get_rng_state(), state)


def test_a_right_padding_tokenizer_still_pads_prompts_on_the_left(tiny):
    """The new tokens follow each prompt's last token: the same draws as the left-padding
    tokenizer, through either sampler; the tokenizer itself is left as it was."""
    model, tokenizer = tiny
    right = copy.deepcopy(tokenizer)
    right.padding_side = "right"
    for sampler in SAMPLERS:
        draws = []
        for tok in (tokenizer, right):
            torch.manual_seed(0)
            draws.append(
                sample_completions(
                    model,
                    tok,
                    [{}] * 4,
                    TINY_PROMPTS["padded"],
                    num_generations=4,
                    max_new_tokens=5,
                    sampler=sampler,
                )
            )
        assert torch.equal(draws[0].prompt_ids, draws[1].prompt_ids)
        assert torch.equal(draws[0].completion_ids, draws[1].completion_ids)
    assert right.padding_side == "right"


def test_an_unknown_sampler_is_an_error(tiny):
    model, tokenizer = tiny
    with pytest.raises(
        ValueError, match=r"sampler must be one of \('generate', 'loop'\), got 'lop'"
    ):
        sample_completions(
            model, tokenizer, [{}], ["1+2="], num_generations=2, max_new_tokens=2, sampler="lop"
        )


def test_training_steps_are_the_same_with_either_sampler():
    """Three GRPO steps from the same seed: the same completions, metrics and weights."""
    rows = load_math_rows("arithmetic", "train")[:12]
    cfg = MathConfig(device="cpu", prompts_per_step=4, num_generations=4, max_steps=3)
    runs = {}
    for sampler in ("generate", "loop"):
        torch.manual_seed(0)
        model, tokenizer = load_model("tiny", torch.device("cpu"))
        trainer = LMGRPOTrainer(cfg, model, tokenizer)
        trainer.sampler = sampler
        history = []
        for step in range(3):
            record, rollout = trainer.step(rows[step * 4 : (step + 1) * 4])
            history.append((rollout.completions, record["loss"], record["kl"]))
        runs[sampler] = history, [p.detach().clone() for p in model.parameters()]
    assert runs["generate"][0] == runs["loop"][0]
    for a, b in zip(runs["generate"][1], runs["loop"][1], strict=True):
        assert torch.equal(a, b)
