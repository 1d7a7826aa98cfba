"""docs/api.md's custom search strategy runs as written, on a real env (matmul 16^3)."""
from __future__ import annotations

import re
from pathlib import Path

from tensorgym import registry

API = Path(__file__).resolve().parent.parent / "docs" / "api.md"


def agents_section_code() -> list[str]:
    text = API.read_text()
    section = text[text.index("\n## Agents"):]
    nxt = section.find("\n## ", 1)
    section = section if nxt < 0 else section[:nxt]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_custom_strategy_of_the_docs_runs(tmp_path, monkeypatch, capsys):
    blocks = agents_section_code()
    assert len(blocks) == 2 and "class HillClimb(SearchStrategy)" in blocks[0]
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # the env's default records database
    namespace: dict = {"__name__": "docs_api"}
    try:
        for block in blocks:
            exec(compile(block, str(API), "exec"), namespace)  # noqa: S102
        history = namespace["history"]
        assert len(history) == 12 and len({r.config.index for r in history}) == 12
        assert any(r.ok for r in history)
        assert "12 trials, best" in capsys.readouterr().out
        assert namespace["strategy"].batch_size == 4  # built by the registry with its option
        assert registry.spec("hill").options[0].name == "batch_size"
    finally:
        registry.unregister("hill")
