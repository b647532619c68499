"""The LM trainers hold to their golden trajectories (``golden_lm.py``), bit for bit.

Each trajectory is run again and every recorded value must be equal: each step's numbers (as
``float.hex``), the hashes of its sampled tokens and advantages, and the hashes of the final
weights; a failure names the trajectory, the step and the field of the first difference.

Bit-for-bit equality is promised only on the recording's kind of machine: the same torch
version, CPU capability and architecture (another build's or CPU's kernels round differently).
Elsewhere these tests are skipped. Re-record (``python tests/golden_lm.py --write``) only for
a change that is meant to change the numbers.

Not marked ``numerics``: each run pins torch to one thread itself, so the one-thread rerun of
``make test`` would repeat the same arithmetic for nothing, and the marker promises a comparison
that holds under any thread count and CPU, which this one does not.
"""

from __future__ import annotations

import json

import golden_lm
import pytest

GOLDEN = json.loads(golden_lm.GOLDEN.read_text())
RECORDED = GOLDEN["recorded"]
OTHER_MACHINE = [
    f"{key} {value} (recorded: {RECORDED[key]})"
    for key, value in golden_lm.machine_kind().items()
    if RECORDED[key] != value
]
pytestmark = pytest.mark.skipif(
    bool(OTHER_MACHINE), reason=f"bit for bit only where recorded; here {', '.join(OTHER_MACHINE)}"
)
HASHES = ("completion_ids", "advantages")


def shown(field: str, value: str | None) -> str:
    """A recorded float as its decimal value and its bits; a hash as it is."""
    if value is None or field in HASHES:
        return str(value)
    return f"{float.fromhex(value)!r} ({value})"


@pytest.mark.parametrize("name", list(golden_lm.TRAJECTORIES))
def test_the_trajectory_is_the_recorded_one_bit_for_bit(name):
    if name == "lora":
        pytest.importorskip("peft")
    assert name in GOLDEN["trajectories"], (
        f"{name} is not recorded: python tests/golden_lm.py --write"
    )
    expected, actual = GOLDEN["trajectories"][name], golden_lm.run_trajectory(name)
    steps = zip(expected["steps"], actual["steps"], strict=True)
    for step, (want, got) in enumerate(steps, start=1):
        for field, value in want.items():
            assert got.get(field) == value, (
                f"{name}, step {step}, {field}: {shown(field, got.get(field))}, "
                f"recorded {shown(field, value)}"
            )
    for network, value in expected["weights"].items():
        assert actual["weights"].get(network) == value, (
            f"{name}, after step {len(expected['steps'])}, weights of the {network}: "
            f"{actual['weights'].get(network)}, recorded {value}"
        )
