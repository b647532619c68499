"""Classroom labs: the checks each lab notebook calls, and the build / check / grade tooling.

One module of checks per lab (``advantages``, ``returns``, ``objective``, ``reward``, ``bugs``,
``llm_step``, ``capstone``), each exercise mirroring the package function of the same name;
``checking`` is the shared case runner; ``build`` and ``grading`` wrap otter-grader.
"""
