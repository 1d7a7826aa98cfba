"""The leaderboard: runs agents on suites of tasks and keeps every trial in a results document
(``run``, ``results``, ``suites``, the replay track ``replay_track``, the RL train/evaluate split
``rl_split``), re-measures configs side by side with each other and the vendor library
(``compare``, ``vendor``, ``peak``, ``harness``), checks documents (``validate``) and ranks and
draws them (``tables``, ``metrics``, ``plots``).

It sits above the agents and baselines only through ``tensorgym.registry``: agents are made by
name (``registry.make``), never imported; and nothing in tensorgym's core imports it (the CLI
does). Importing this package imports none of its modules.
"""
