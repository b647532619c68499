"""Classroom labs, the learner's side: the checks each lab notebook calls.

One module of checks per lab (``advantages``, ``returns``, ``objective``, ``reward``, ``bugs``,
``llm_step``, ``capstone``), each exercise mirroring the package function of the same name;
``checking`` is the shared case runner. Building the labs and grading them is the instructor's
(``grpo_minimal.instructor``), which nothing here imports.
"""
