"""Course tooling: what the notebooks draw and run around the core, never imported by it.

Widgets (``widgets``) and figures over seeds (``figures``), the experiment drivers of notebooks 07,
08 and 10 (``ablations``, ``hacking``, ``rft``, ``sft``, ``r1_zero`` and its task ``reasoning``),
bootstrap intervals (``stats``), the memory planner of notebook 09 (``memory``) and the notebooks'
generated first cells (``notebook_setup``). The GRPO core they build on is ``grpo_minimal/``.
"""
