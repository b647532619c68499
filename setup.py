"""Build hook: the wheel carries the course's shipped files as package data.

``data/`` (splits, models, the scripts that made them) and ``bench/results/`` (committed results
the notebooks read) stay where they are in the repository. Building a wheel copies them into
``grpo_minimal/_shipped/``, where ``grpo_minimal.shipped`` finds them; an editable install reads
the checkout's own folders instead. Everything else about the package is in ``pyproject.toml``.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
COURSE_FILES = {"data": HERE / "data", "results": HERE / "bench" / "results"}


class BuildPyWithCourse(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads data/ and bench/results/ in place
        target = Path(self.build_lib) / "grpo_minimal" / "_shipped"
        for name, source in COURSE_FILES.items():
            if not source.is_dir():
                raise SystemExit(f"setup.py: {source} is missing; build from a checkout or sdist")
            shutil.rmtree(target / name, ignore_errors=True)  # nothing left from an older build
            shutil.copytree(
                source,
                target / name,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
            )


setup(cmdclass={"build_py": BuildPyWithCourse})
