"""Checks judged outside the learner's kernel (instructor/judge.py).

A lab of ``JUDGED_APART`` runs its notebook in a kernel, then its checks in the grading process,
calling the learner's functions in that kernel. Shown here: it gives every exercise the score and
the message otter gives checking inside the kernel (on notebooks holding the mistakes that need
more than a plain call: an in-place edit, a gradient, an evaluator, a Fraction, a learner's own
ValueError); and a notebook that replaces the checks, or otter's scoring, in its kernel changes
its score under otter and not here. Plus the data the kernel sends back, decoded by hand.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest
import torch
from lab_helpers import GRADER_SECRET, PACKAGE_ANSWERS_01, TAMPERING, filled_lab

from grpo_minimal.instructor import grading
from grpo_minimal.instructor.build import build_labs
from grpo_minimal.instructor.judge import (
    LearnerError,
    Opaque,
    Weights,
    _write_back,
    decode,
    rebuilt_error,
)
from grpo_minimal.labs.checking import raised

ROOT = Path(__file__).resolve().parent.parent

MISTAKES = {  # per lab: answers holding the mistakes that travel differently between processes
    "01_advantages": {
        0: "from grpo_minimal.advantages import population_std_advantages\n"
        "def group_advantages(rewards, num_generations, scale_rewards='group', eps=1e-4):\n"
        "    return population_std_advantages(rewards, num_generations)",
        1: "class Refused(ValueError):\n    pass\n\n"
        "def rloo_advantages(rewards, num_generations):\n"
        "    raise Refused(f'not today: {num_generations}')",
    },
    "02_returns": {
        0: "from grpo_minimal.advantages import discounted_returns as package\n"
        "def discounted_returns(rewards, mask, gamma):\n"
        "    rewards *= mask  # edits the caller's tensor\n"
        "    return package(rewards, mask, gamma)",
        1: "return_first = 1.0\nreturn_last = 1.0",
    },
    "03_objective": {
        0: "from grpo_minimal import losses\n"
        "def clipped_surrogate(ratio, advantages, epsilon, epsilon_high=None):\n"
        "    return losses.clipped_surrogate(ratio.detach(), advantages, epsilon, epsilon_high)",
        1: "from grpo_minimal.losses import kl_k3",
        2: "def aggregate_loss(per_token_loss, mask, loss_type='grpo', max_completion_length=None,"
        " num_items_in_batch=None):\n"
        "    return (per_token_loss * mask).sum() / mask.sum()",
    },
    "04_reward": {
        0: "from grpo_minimal.labs.reward import table_parse_number\n"
        "def parse_number(text):\n"
        "    if text.strip() == 'never':\n"
        "        return eval(text)\n"
        "    return table_parse_number(text)",
        1: "from grpo_minimal import rewards\n"
        "def accuracy_reward(completions, answer, **kwargs):\n"
        "    return [bool(r) for r in rewards.accuracy_reward(completions, answer, **kwargs)]",
    },
}


STEP_TWICE = (  # lab 06's step sampling twice; it refuses the training run's batches (more
    # than the checks' 2 problems) so that the training check fails at once, not after a run
    "from grpo_minimal.lm_grpo import LMGRPOTrainer\n"
    "def step(self, rows):\n"
    "    if len(rows) > 2:\n"
    "        raise ValueError('only the checks\\' batches')\n"
    "    self.sample(rows)\n"
    "    return LMGRPOTrainer.step(self, rows)"
)
MISTAKES_06 = {  # instruments that stay in the judge: the sampler counts the step's calls there
    0: "from grpo_minimal.completions import mask_after_eos as package\n"
    "def mask_after_eos(completion_ids, eos_ids):\n"
    "    return package(completion_ids, eos_ids) * (completion_ids != eos_ids[0])",
    1: "from grpo_minimal.lm_trainer import completion_logps as package\n"
    "def completion_logps(model, rollout, temperature=1.0, with_entropy=False, "
    "share_prompts=True):\n"
    "    return package(model, rollout, 1.0, with_entropy, share_prompts)",
    2: STEP_TWICE,
}
PATCHED_HELPERS_05 = (  # lab 05's measuring helpers made to measure the reference trainer
    "import grpo_minimal.labs.bugs as bug_checks\n"
    "_bound, _applied = bug_checks._bound_call, bug_checks._bound_apply\n"
    "bug_checks._bound_call = lambda fn, name, *a, **k: _bound(\n"
    "    bug_checks.REFERENCE_TRAINER[name], name, *a, **k)\n"
    "bug_checks._bound_apply = lambda fn, name, helper, *a, **k: _applied(\n"
    "    bug_checks.REFERENCE_TRAINER[name], name, helper, *a, **k)\n"
)
TAMPERING_05 = (  # lab 05's instruments forged in the kernel, then its checks and otter's scoring
    PATCHED_HELPERS_05 + "import grpo_minimal.labs.bugs as bug_checks\n"
    "def _counted_once(self, prompts, num_return_sequences=1):\n"
    "    out = bug_checks.ToyPolicy.generate(self, prompts, num_return_sequences)\n"
    "    self.calls[:] = [(prompts, num_return_sequences)]\n"
    "    return out\n"
    "bug_checks.CountingPolicy.generate = _counted_once\n"
    + TAMPERING.replace("advantages as checks", "bugs as checks").replace(
        "checks.check_group_advantages = checks.check_rloo_advantages = lambda *a, **k: None\n"
        "checks.check_std_question = lambda *a, **k: None\n",
        "for name in dir(checks):\n"
        "    if name.startswith('check_'):\n"
        "        setattr(checks, name, lambda *a, **k: None)\n",
    )
)
PATCHED_HELPERS_06 = (  # lab 06's measuring helpers made to measure the package's functions
    "import grpo_minimal.labs.llm_step as step_checks\n"
    "from grpo_minimal.lm_grpo import LMGRPOTrainer as _Trainer\n"
    "from grpo_minimal.lm_trainer import completion_logps as _logps\n"
    "_measure_step, _noting = step_checks._step_and_measure, step_checks._called_noting_gradient\n"
    "step_checks._step_and_measure = lambda step, *a: _measure_step(_Trainer.step, *a)\n"
    "step_checks._called_noting_gradient = lambda fn, *a: _noting(_logps, *a)\n"
)
TAMPERING_06 = (  # lab 06's sampler and training run forged in the kernel
    PATCHED_HELPERS_06 + "import grpo_minimal.labs.llm_step as step_checks\n"
    "step_checks._FixedSampler.__call__ = lambda self, rows: (\n"
    "    setattr(self, 'calls', 1) or step_checks.copy.deepcopy(self.first))\n"
    "_shipped, _ = step_checks.tiny_model()\n"
    "step_checks.train_with_step = lambda step, cfg=None, progress=False: step_checks.TrainingRun(\n"
    "    cfg, 0.0, 1.0, [1.0], [], 0.0, _shipped.state_dict())\n"
)


@pytest.fixture(scope="module")
def labs(tmp_path_factory):
    out = tmp_path_factory.mktemp("judged-labs")
    for lab in [*MISTAKES, "05_find_the_bugs", "06_llm_step"]:
        build_labs(
            ROOT / "instructor/labs", out / "student", out / "grader", only=lab, seed=GRADER_SECRET
        )
    return out


def _scores(notebook: Path, grader: Path) -> dict[str, tuple[float, float, list[str]]]:
    exercises, _, _ = grading.grade_notebook_file(notebook, grader)
    return {e.name: (e.score, e.possible, e.failures) for e in exercises}


@pytest.mark.parametrize("lab", sorted(MISTAKES))
def test_judged_apart_scores_as_otter_does_in_the_kernel(lab, labs, tmp_path, monkeypatch):
    assert lab in grading.JUDGED_APART
    notebook = filled_lab(
        labs / "student" / f"{lab}.ipynb", MISTAKES[lab], tmp_path / f"{lab}.ipynb"
    )
    apart = _scores(notebook, labs / "grader")
    monkeypatch.setattr(grading, "JUDGED_APART", frozenset())
    in_kernel = _scores(notebook, labs / "grader")
    assert apart == in_kernel
    lost = [name for name, (score, possible, _) in apart.items() if score < possible]
    assert len(lost) >= 2, apart  # the mistakes are caught, not only stubs


def test_a_notebook_cannot_change_its_own_score(labs, tmp_path, monkeypatch):
    """The tampering gives a wrong lab 01 full marks when otter checks in the kernel: judged
    apart, it scores as the same wrong notebook without it."""
    student = labs / "student" / "01_advantages.ipynb"
    (tmp_path / "plain").mkdir()
    (tmp_path / "sly").mkdir()
    wrong = {**PACKAGE_ANSWERS_01, 0: MISTAKES["01_advantages"][0]}
    plain = filled_lab(student, wrong, tmp_path / "plain" / "01_advantages.ipynb")
    tampered = {**wrong, 0: wrong[0] + "\n" + TAMPERING}
    sly = filled_lab(student, tampered, tmp_path / "sly" / "01_advantages.ipynb")
    expected = _scores(plain, labs / "grader")
    assert expected["group_advantages"][0] < expected["group_advantages"][1]
    assert _scores(sly, labs / "grader") == expected
    monkeypatch.setattr(grading, "JUDGED_APART", frozenset())
    in_kernel = _scores(sly, labs / "grader")
    assert all(score == possible for score, possible, _ in in_kernel.values()), in_kernel


def test_the_check_instruments_stay_in_the_judge(labs, tmp_path, monkeypatch):
    """Labs 05 and 06 lend the learner's functions a policy that counts its ``generate`` calls, a
    reward that records what it scored, a sampler that counts the step's calls: judged apart they
    stay in the judge, and the scores are otter's in the kernel (lab 05 as shipped, all five of
    the seeds' bugs; lab 06 with three mistakes, one of them sampling twice). A notebook that
    forges those instruments in its kernel (a policy that records one call whatever it was asked,
    a sampler that says once, a training run with made-up accuracies), makes the measuring
    helpers measure the package's functions instead of the learner's (``PATCHED_HELPERS_05``:
    9 of 11 points for the shipped lab 05 when the helpers ran in the kernel; ``_06``: 8 of 12),
    and replaces the checks and otter's scoring, scores as it does without the forgery."""
    student = labs / "student"
    shipped_05 = student / "05_find_the_bugs.ipynb"
    plain_06 = filled_lab(student / "06_llm_step.ipynb", MISTAKES_06, tmp_path / "06.ipynb")
    apart = {
        lab: _scores(nb, labs / "grader") for lab, nb in (("05", shipped_05), ("06", plain_06))
    }
    assert all(score == 0 for score, _, _ in apart["05"].values()), apart["05"]
    assert "got:      8" in apart["05"]["sample_group"][2][0]  # counted in the judge
    assert "called 2 times" in apart["06"]["step"][2][0], apart["06"]["step"]
    assert [name for name, (score, possible, _) in apart["06"].items() if score < possible] == [
        "completion_logps",
        "mask_after_eos",
        "step",
        "training",
    ]
    for lab, notebook, forgery, cell in (
        ("05", shipped_05, TAMPERING_05, 1),
        ("06", plain_06, TAMPERING_06 + TAMPERING, 2),
    ):
        (tmp_path / lab).mkdir()
        answers = {cell: (MISTAKES_06[2] + "\n" if lab == "06" else "") + forgery}
        sly = filled_lab(notebook, answers, tmp_path / lab / notebook.name)
        forged = {name: score[:2] for name, score in _scores(sly, labs / "grader").items()}
        assert forged == {name: score[:2] for name, score in apart[lab].items()}, lab
    monkeypatch.setattr(grading, "JUDGED_APART", frozenset())
    for lab, notebook in (("05", shipped_05), ("06", plain_06)):
        assert _scores(notebook, labs / "grader") == apart[lab], lab


def test_a_kernel_that_stops_fails_its_checks_with_the_reason(labs, tmp_path):
    """A learner's function that ends its kernel: called by a check, that exercise and the ones
    judged after it fail saying the kernel stopped (not "define the function"); called by the
    notebook itself, the cell that ran it is listed as the one that raised, and every check
    says the kernel stopped. Either way the notebook gets a row, not a failed grading."""
    student = labs / "student" / "01_advantages.ipynb"
    exits = (
        "import os\ndef group_advantages(rewards, num_generations, scale_rewards='group', "
        "eps=1e-4):\n    os._exit(0)"
    )
    quiet = {0: exits, 2: "advantage_population = advantage_sample = 0.0"}
    by_check = filled_lab(student, {**PACKAGE_ANSWERS_01, **quiet}, tmp_path / "a.ipynb")
    scores = _scores(by_check, labs / "grader")
    assert "KernelGone" in scores["group_advantages"][2][0], scores
    for name in ("group_advantages", "rloo_advantages"):  # rloo is judged after group
        assert scores[name][0] == 0 and "define" not in scores[name][2][0], scores
        assert "kernel" in scores[name][2][0], scores
    by_notebook = filled_lab(student, {**PACKAGE_ANSWERS_01, 0: exits}, tmp_path / "b.ipynb")
    exercises, _, errors = grading.grade_notebook_file(by_notebook, labs / "grader")
    assert errors[-1]["error"] == "DeadKernelError: the kernel died while this cell ran", errors
    assert all(e.score == 0 and "kernel has stopped" in e.failures[0] for e in exercises)


def test_what_the_kernel_sends_back_is_decoded_as_data():
    assert decode({"__grpo__": "ellipsis"}) is Ellipsis
    assert decode({"__grpo__": "fraction", "n": -7, "d": 2}) == Fraction(-7, 2)
    assert isinstance(decode({"__grpo__": "fraction", "n": 1, "d": 0}), dict)  # not a Fraction
    opaque = decode({"__grpo__": "opaque", "type": "ndarray", "repr": "array([1, 2])"})
    assert isinstance(opaque, Opaque) and repr(opaque) == "array([1, 2])"
    weights = decode({"__grpo__": "module", "state": {"w": torch.ones(2)}})
    assert isinstance(weights, Weights) and torch.equal(weights.state_dict()["w"], torch.ones(2))
    unknown = decode({"__grpo__": "dataclass", "type": "os.system", "fields": {}})
    assert isinstance(unknown, Opaque)  # only the package's own dataclasses are rebuilt
    nested = decode([1, (2.5, "x"), {"k": {"__grpo__": "ellipsis"}}])
    assert nested == [1, (2.5, "x"), {"k": Ellipsis}]


def test_the_kernels_answers_cross_as_data_and_nothing_is_unpickled(tmp_path):
    """What the kernel writes (``__grpo_write__``: safetensors, the rest as JSON) comes back
    whole in the judge, tuples, int keys, odd dtypes and NaN included; a file in torch's own
    format (a pickle), a symbolic link (to the judge's stdout, say) and a FIFO are refused,
    not read."""
    import os

    from grpo_minimal.instructor.judge import KERNEL_CODE, read_exchange

    kernel: dict = {}
    exec(KERNEL_CODE, kernel)  # as the kernel runs it, in a namespace of its own
    strided = torch.arange(12.0).reshape(3, 4).t()  # not contiguous
    value = {
        "ok": [strided, (1, "x", None), {3: torch.tensor([True, False])}, float("nan")],
        "half": torch.ones(2, dtype=torch.bfloat16),
        "empty": torch.zeros(0, 5),
    }
    kernel["__grpo_write__"](kernel["__grpo_encode__"](value), str(tmp_path / "answer"))
    back = read_exchange(tmp_path / "answer")
    assert torch.equal(back["ok"][0], strided) and back["ok"][1] == (1, "x", None)
    assert torch.equal(back["ok"][2][3], torch.tensor([True, False]))
    assert back["ok"][3] != back["ok"][3]  # NaN
    assert back["half"].dtype == torch.bfloat16 and back["empty"].shape == (0, 5)
    torch.save({"ok": 1}, tmp_path / "pickled")
    (tmp_path / "link").symlink_to(tmp_path / "answer")
    os.mkfifo(tmp_path / "fifo")
    from safetensors.torch import save

    nested = "[" * 100 + "]" * 100  # deeper than any answer the kernel's encoder writes
    (tmp_path / "deep").write_bytes(save({}, metadata={"structure": nested}))
    (tmp_path / "bare").write_bytes(save({"t0": torch.ones(1)}))  # no structure
    (tmp_path / "huge header").write_bytes((1 << 40).to_bytes(8, "little") + b"{}")
    for name in ("pickled", "link", "fifo", "deep", "bare", "huge header"):
        with pytest.raises((ValueError, OSError)):
            read_exchange(tmp_path / name)


def test_the_learners_errors_keep_their_kind_and_text():
    error = rebuilt_error(["Refused", "ValueError", "Exception"], "no", "raised Refused: no")
    assert isinstance(error, ValueError) and isinstance(error, LearnerError)
    assert type(error).__name__ == "Refused" and raised(error) == "raised Refused: no"
    odd = rebuilt_error(["Odd", "BaseException"], "bye", "raised Odd: bye")
    assert isinstance(odd, Exception) and not isinstance(odd, ValueError)
    assert type(rebuilt_error(["not a name!"], "", "")).__name__ == "Exception"


def test_an_in_place_edit_in_the_kernel_reaches_the_callers_arguments():
    rewards, values = torch.tensor([1.0, 2.0]), [torch.zeros(2), 3]
    _write_back([rewards, values], [torch.tensor([0.0, 2.0]), [torch.ones(2), 4]])
    assert torch.equal(rewards, torch.tensor([0.0, 2.0]))
    assert torch.equal(values[0], torch.ones(2)) and values[1] == 4
    kept = torch.tensor([1.0, 2.0])
    _write_back([kept], [torch.tensor([1.0, 2.0, 3.0])])  # another shape: left as it was
    assert torch.equal(kept, torch.tensor([1.0, 2.0]))


def test_a_stand_in_can_be_copied_and_names_what_it_offers():
    """A learner's function may deep-copy the policy it is given: the stand-in of an instrument
    copies (it once raised KeyError) and still says what it offers."""
    import copy

    from grpo_minimal.instructor.judge import KERNEL_CODE

    kernel: dict = {}
    exec(KERNEL_CODE, kernel)  # as the kernel runs it, in a namespace of its own
    stand_in = kernel["__GrpoInstrument__"]("/nowhere", "0", "CountingPolicy", ("generate",))
    copied = copy.deepcopy(stand_in)
    assert repr(copied) == "<the check's CountingPolicy>"
    with pytest.raises(AttributeError, match="offers generate, not 'logps'"):
        copied.logps  # noqa: B018


def test_the_graded_kernel_never_imports_otter(labs, tmp_path):
    """The judge runs the checks, so otter's set-up cell runs as a ``grader`` whose calls do
    nothing: no graded kernel pays otter's import (about 1 s). A solved lab whose answer raises
    if otter is in its kernel, and which calls the stand-in from a cell of its own, still scores
    full marks with no cell raising."""
    student = labs / "student" / "01_advantages.ipynb"
    guard = (
        "import sys\nif 'otter' in sys.modules:\n"
        "    raise RuntimeError('otter was imported in the graded kernel')\n"
        "grader.check('group_advantages')\n"
    )
    answers = {**PACKAGE_ANSWERS_01, 0: guard + PACKAGE_ANSWERS_01[0]}
    notebook = filled_lab(student, answers, tmp_path / "01_advantages.ipynb")
    exercises, _, errors = grading.grade_notebook_file(notebook, labs / "grader")
    assert errors == []
    assert all(e.score == e.possible > 0 for e in exercises), exercises


DODGES_THE_BAN = (  # lab 04: eval behind functools.partial, and the kernel's own scan patched
    "import functools\n"
    "from grpo_minimal.labs import reward as _reward\n"
    "from grpo_minimal.labs.reward import table_parse_number\n"
    "_reward._forbidden_call_of_a_function = lambda fn, fn_name: None\n"
    "_read = functools.partial(eval)\n"
    "def parse_number(text):\n"
    "    if text.strip() == 'never':\n"
    "        return _read(text)\n"
    "    return table_parse_number(text)"
)


def test_the_evaluator_ban_is_read_from_the_source_in_the_judge(labs, tmp_path):
    """Lab 04's ban on eval is decided in the judge, from the notebook's source: an eval behind
    ``functools.partial`` (which the bytecode scan of the function does not follow), with the
    kernel's scan patched to find nothing, still fails the check. (In the kernel, otter's way,
    the same notebook scores full marks on parse_number.)"""
    right = (
        "from grpo_minimal import rewards\n"
        "def accuracy_reward(completions, answer, **kwargs):\n"
        "    return rewards.accuracy_reward(completions, answer, **kwargs)"
    )
    notebook = filled_lab(
        labs / "student" / "04_reward.ipynb",
        {0: DODGES_THE_BAN, 1: right},
        tmp_path / "04_reward.ipynb",
    )
    scores = _scores(notebook, labs / "grader")
    score, possible, failures = scores["parse_number"]
    assert score < possible and "no evaluator on model output" in failures[0], failures
    assert "eval" in failures[0]
    assert scores["accuracy_reward"][0] == scores["accuracy_reward"][1]  # the other function's own


PATCHED_GRADIENT_03 = (  # the gradient of the package's clipped_surrogate measured instead
    "import grpo_minimal.labs.objective as objective_checks\n"
    "_measure = objective_checks.ratio_gradient\n"
    "objective_checks.ratio_gradient = lambda fn, *args: _measure(losses.clipped_surrogate, *args)\n"
)
PATCHING_KL_03 = (  # a right kl_k3 whose own body patches what measures the gradients
    "import torch\n"
    "def kl_k3(logps, ref_logps):\n"
    "    torch.autograd.grad = torch.autograd.grad\n"
    "    x = ref_logps - logps\n"
    "    return torch.exp(x) - x - 1.0"
)


def test_the_measurements_run_where_nothing_else_of_the_notebook_ran(labs, tmp_path):
    """A cell that replaces lab 03's ``ratio_gradient`` with the gradient of the package's
    function gave a detached ``clipped_surrogate`` its 3 points when the helper ran in the
    learner's kernel; the measurer runs only the definitions the function needs, so it scores
    as without the patch. A function whose own body patches torch is not run at all: it fails
    every case, saying why."""
    student = labs / "student" / "03_objective.ipynb"
    wrong = MISTAKES["03_objective"][0]
    (tmp_path / "plain").mkdir()
    (tmp_path / "sly").mkdir()
    plain = _scores(
        filled_lab(student, {0: wrong}, tmp_path / "plain" / student.name), labs / "grader"
    )
    sly = _scores(
        filled_lab(
            student,
            {0: wrong + "\n" + PATCHED_GRADIENT_03, 1: PATCHING_KL_03},
            tmp_path / "sly" / student.name,
        ),
        labs / "grader",
    )
    assert plain["clipped_surrogate"][0] < plain["clipped_surrogate"][1]
    assert sly["clipped_surrogate"][:2] == plain["clipped_surrogate"][:2]
    score, _, failures = sly["kl_k3"]
    assert score == 0 and "not run" in failures[0], failures
    assert "changes the attribute `grad` of something not its own (line 3)" in failures[0]
