"""Course tooling: what the notebooks draw and run around the core, never imported by it.

Widgets (``widgets``) and figures over seeds (``figures``), the experiment drivers of notebooks 07,
08, 10 and 13 (``ablations``, ``hacking``, ``rft``, ``sft``, ``r1_zero`` and its task
``reasoning``, ``seed002``), bootstrap intervals (``stats``), the memory planner of notebook 09
(``memory``) and the notebooks' generated set-up cells under each title (``notebook_setup``). The
GRPO core they build on is ``grpo_minimal/``.
"""
