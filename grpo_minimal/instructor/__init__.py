"""The instructor's lab tooling, behind ``grpo-minimal lab build | grade`` (and ``lab check``):
``build`` writes the student notebooks and the autograder zips from ``instructor/labs/*.py``,
``grading`` grades a folder of submissions, ``commands`` adds the ``lab`` commands to the CLI.

A learner's lab kernel never imports this folder: the checks it calls are ``grpo_minimal.labs``.
"""
