"""Process machinery (issue 31): helper processes that die with their parent (``child``), forks
of a zygote (``zygote``), the cores a process may use and the per-device locks (``host``).

A low floor: features, agents and measurement all start processes through it, so nothing here
imports any other part of tensorgym."""
