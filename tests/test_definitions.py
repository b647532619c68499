"""The learner's functions defined again apart (instructor/definitions.py, measurer.py): which
statements of a notebook are kept, what the policy refuses, and the measurer's process.

The whole road (a notebook graded with its helpers patched in its kernel) is in test_judge.py.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_minimal.instructor.definitions import definitions, refusal
from grpo_minimal.labs.source import statements

ROOT = Path(__file__).resolve().parent.parent

ACCEPTED = {
    "a local tensor written in place": "def f(x):\n    y = torch.zeros(3, dtype=torch.float32)\n"
    "    y[0] = 1\n    x.grad = None\n    return y",
    "the trainer's own attributes": "def step(self, rows):\n    self.steps_done += 1\n"
    "    for p in self.model.parameters():\n        p.grad = None",
    "an exception of one's own": "class Refused(ValueError):\n    pass",
    "a closure filling a local list": "def f(xs):\n    out = []\n    def g(v):\n"
    "        out.append(v)\n    for x in xs:\n        g(x)\n    return out",
    "getattr with a plain name": "def f(x):\n    return getattr(x, 'shape')",
    "a context manager's value": "def f(x):\n    with torch.no_grad() as g:\n        g.x = 1",
    "imports of the allowed modules": "import torch.nn.functional as F",
    "annotations from the future": "from __future__ import annotations",
    "a model put in evaluation mode": "def f(model):\n    model.eval()\n    return model",
    "an error's code": "def f(err):\n    return err.code",
}
REFUSED = {  # snippet -> what the reason says
    "def f(x):\n    torch.autograd.grad = None": "changes the attribute `grad` of something not",
    "def f(x):\n    g = torch.autograd\n    g.grad = None": "changes the attribute `grad`",
    "def f(x):\n    for g in [torch.autograd]:\n        g.grad = None": "changes the attribute",
    "def f(x):\n    g = getattr(torch, 'autograd')\n    g.grad = 1": "changes the attribute",
    "def f(x):\n    TABLE['a'] = 1": "changes an item of something not its own",
    "def f(x):\n    checks.REFERENCE_TRAINER.update(a=1)": "uses `update` of something not",
    "def f(x):\n    dict.update(checks.REFERENCE_TRAINER, a=1)": "uses `update` of something",
    "def f(x):\n    u = checks.REFERENCE_TRAINER.update\n    u(a=1)": "uses `update` of something",
    "def f(x):\n    torch.nn.modules.module.register_module_forward_hook(h)": "uses `register_",
    "def f(x):\n    import grpo_minimal.labs.objective as oc\n    oc.ratio_gradient = None": "changes the attribute `ratio_gradient`",
    "def f(x, g=torch.autograd):\n    g.grad = None": "changes the attribute `grad`",
    "import torch.library as L": "imports `torch.library`",
    "import torch._C as C": "imports `torch._C`",
    "def f(x):\n    setattr(torch, 'x', 1)": "names `setattr`",
    "def f(x):\n    return vars(x)": "names `vars`",
    "def f(x):\n    return x.__class__": "uses the attribute `__class__`",
    "def f(x):\n    return torch._C": "uses the attribute `_C`",
    "def f(x):\n    return getattr(x, 'sh' + 'ape')": "uses `getattr` other than as",
    "def f(x):\n    g = getattr\n    return g(x, 'shape')": "names `getattr`",
    "def f(x):\n    return getattr(x, 'load')": "uses `getattr` other than as",
    "from grpo_minimal.labs.reward import builtins": "imports `builtins` from",
    "def f(x):\n    return checks.builtins": "uses the attribute `builtins`",
    "def f(x):\n    return np.load(x)": "uses the attribute `load`",
    "def f(x):\n    global y\n    y = 1": "uses `global`",
    "def f(x):\n    import os": "imports `os`",
    "import sys": "imports `sys`",
    "from functools import update_wrapper": "imports `update_wrapper` from `functools`",
    "class T(torch.Tensor):\n    pass": "defines the class `T`, which is not an exception",
    "def f(x):\n    return type('T', (torch.Tensor,), {})": "makes a class with `type`",
    "def f(x: setattr(torch, 'a', 1)):\n    pass": "names `setattr`",
    "def f(x=torch.load('a')):\n    pass": "uses the attribute `load`",
    "f = lambda x: torch.library": "uses the attribute `library`",
}


@pytest.mark.parametrize("what", sorted(ACCEPTED))
def test_what_a_learner_writes_is_accepted(what):
    assert refusal(ast.parse(ACCEPTED[what]).body[0], {"Refused"}) is None


@pytest.mark.parametrize("source", sorted(REFUSED))
def test_what_reaches_the_measurement_is_refused_with_its_line(source):
    why = refusal(ast.parse(source).body[0], set())
    assert why is not None and REFUSED[source] in why, why
    assert why.endswith(")") and "(line " in why


def test_every_solution_is_defined_again_whole():
    """Every function of every lab's solution is kept, with nothing refused."""
    for notebook in sorted((ROOT / "notebooks/labs").glob("0*.ipynb")):
        solution = ROOT / "instructor/labs" / f"{notebook.stem}.py"
        cells = [c for c in solution.read_text().split("# %%") if not c.startswith(" [")]
        cells = [c.replace("# BEGIN SOLUTION", "").replace("# END SOLUTION", "") for c in cells]
        names = sorted({s.name for s in statements(cells) if isinstance(s, ast.FunctionDef)})
        assert names, notebook.name
        found = definitions(cells, names)
        assert found.refused == {}, (notebook.name, found.refused)
        kept = {
            s.name
            for _, module in found.cells
            for s in module.body
            if isinstance(s, ast.FunctionDef)
        }
        assert kept == set(names), notebook.name


def test_only_what_the_graded_functions_need_is_kept():
    cells = [
        "import torch\nimport grpo_minimal.labs.objective as checks\nSCALE = 2.0",
        "def helper(x):\n    return x * SCALE\n\ndef graded(x):\n    return helper(x)",
        "checks.ratio_gradient = lambda fn, *a: None\nprint(graded(torch.ones(1)))",
        "run = train_for_an_hour()\ndef unused():\n    return 0",
    ]
    found = definitions(cells, ["graded"])
    kept = [ast.unparse(s) for _, module in found.cells for s in module.body]
    assert kept == [
        "SCALE = 2.0",
        "def helper(x):\n    return x * SCALE",
        "def graded(x):\n    return helper(x)",
    ]
    assert found.refused == {}
    helper = "def helper(x):\n    checks.X = 1\n    return x"
    refused = definitions([cells[0], cells[1], helper], ["graded"])
    assert (
        "changes the attribute `X` of something not its own (line 2)" in refused.refused["graded"]
    )


def test_a_name_changed_in_place_at_the_top_level_is_refused():
    """``ROWS.append(...)`` at the top level is not run again in the measurer: a graded function
    reading ``ROWS`` would see another list there than in the kernel, so it is refused."""
    cells = ["ROWS = [1.0]\nROWS.append(2.0)", "def graded(x):\n    return x * len(ROWS)"]
    found = definitions(cells, ["graded"])
    assert (
        "reads `ROWS`, which a top-level statement changes in place (line 2)"
        in found.refused["graded"]
    )


def test_a_function_made_where_the_reading_cannot_see_is_refused():
    found = definitions(["exec('def graded(x):\\n    return x')"], ["graded"])
    assert "is bound by no statement grading can read" in found.refused["graded"]


@pytest.mark.parametrize(
    "binding",
    ["SCALE = 2.0\nSCALE += 5", "if True:\n    SCALE = 2.0", "for SCALE in [1.0, 2.0]:\n    pass"],
)
def test_a_name_the_measurer_cannot_bind_as_the_kernel_did_is_refused(binding):
    """The measurer runs imports, defs, classes and top-level assignments to names; a name a
    graded function reads that anything else binds (``+=``, a block, a loop) would hold another
    value there than in the kernel, so the function is refused, saying which line."""
    found = definitions([binding, "def graded(x):\n    return x * SCALE"], ["graded"])
    assert "bound by a statement that grading does not run again" in found.refused["graded"]
    assert found.cells == []


def test_the_measurer_runs_the_definitions_alone_and_prints_nowhere(tmp_path):
    """The measurer's process: not dumpable; definitions sent down its pipe, then code; a
    learner's print does not reach the pipe the judge reads, and an error comes back as one
    line."""
    from grpo_minimal.instructor.measurer import Measurer, start

    cells = ["import math\ndef area(r):\n    print('noise')\n    return math.pi * r * r"]
    process = start(["grpo_minimal.labs.checking"])
    try:
        measuring = Measurer(process, tmp_path, cells, definitions(cells, ["area"]))
        assert measuring.alive
        answer = measuring.ask({"op": "call", "name": "area", "args": [2.0], "kwargs": {}})
        assert answer["ok"] == pytest.approx(4 * 3.141592653589793)
        assert measuring._run("undefined_name") == "NameError: name 'undefined_name' is not defined"
        # not dumpable (PR_GET_DUMPABLE = 3): no process of the same user opens its memory
        assert (
            measuring._run("import ctypes\nassert ctypes.CDLL(None).prctl(3, 0, 0, 0, 0) == 0")
            is None
        )
    finally:
        process.kill()
        process.wait()


@pytest.mark.skipif(
    subprocess.run(["which", "bwrap"], capture_output=True).returncode != 0,
    reason="needs bubblewrap",
)
def test_what_the_notebook_left_running_is_ended_before_the_measurer_runs(tmp_path):
    """In a process-id namespace of its own (bwrap's, as in the sandbox), ``end_other_processes``
    kills every process but itself, pid 1 and the ones it keeps: daemons in new sessions
    included."""
    script = (
        "import json, os, subprocess, sys\n"
        "from grpo_minimal.instructor.judging import end_other_processes\n"
        "kept = subprocess.Popen(['sleep', '60'])\n"
        "left = [subprocess.Popen(['sleep', '60'], start_new_session=True) for _ in range(3)]\n"
        "end_other_processes(keep={kept.pid})\n"
        "for p in left:\n"
        "    p.wait(timeout=10)\n"
        "print(json.dumps({'kept': kept.poll() is None, 'left': [p.returncode for p in left]}))\n"
        "kept.kill()\n"
    )
    argv = [
        "bwrap",
        "--dev-bind",
        "/",
        "/",
        "--unshare-pid",
        "--proc",
        "/proc",
        "--die-with-parent",
        sys.executable,
        "-c",
        script,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if done.returncode != 0 and "bwrap" in done.stderr:
        pytest.skip(f"bwrap cannot start here: {done.stderr.strip()[:200]}")
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome == {"kept": True, "left": [-9, -9, -9]}, done.stderr
