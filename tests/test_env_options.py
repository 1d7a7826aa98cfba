"""Env options are checked where they are given (gym.make): a bad one is one TensorGymError line
that says what is allowed, before anything is measured or a file is made."""
from __future__ import annotations

import gymnasium as gym
import pytest

import tensorgym  # noqa: F401  (registers the envs)
from tensorgym.errors import TensorGymError
from tensorgym.processes.host import available_cpus

ENV = "TensorSched-matmul-1024-cpu"

BAD = [
    ({"num_threads": -1}, "num_threads must be an integer"),
    ({"num_threads": 1.5}, "num_threads must be an integer"),
    ({"num_threads": available_cpus() + 1}, "the cores this process may use"),
    ({"failure_reward": float("nan")}, "failure_reward must be a finite number"),
    ({"failure_reward": "low"}, "failure_reward must be a finite number"),
    ({"records": 123}, "records is a path, a Records"),
    ({"measure_options": "fast"}, "measure_options is a tensorgym.measure.MeasureOptions"),
    ({"measurer": "local"}, "measurer is a tensorgym Measurer"),
    ({"on_miss": "nearest"}, "options of measure='replay'"),
    ({"dataset_device": "cpu/x/y/2t"}, "options of measure='replay'"),
    ({"use_cache": "yes"}, "use_cache is True or False"),
    ({"confirm_best": 1}, "confirm_best is True or False"),
    ({"early_stop": float("nan")}, "early_stop must be 0"),
    ({"early_stop": True}, "early_stop must be 0"),
    ({"render_mode": "human"}, "render_mode is None or 'ansi'"),
    ({"session": object()}, "session is a tensorgym.session.TuningSession"),
    ({"measure": "fast"}, "unknown measure"),
    ({"ray": 3}, "ray is an address"),
]


@pytest.mark.parametrize("options,words", BAD, ids=[next(iter(o)) + "=" + repr(next(iter(
    o.values()))) for o, _ in BAD])
def test_a_bad_option_is_refused_at_make(options, words, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a bad records= must make no file here either
    with pytest.raises(TensorGymError, match=words):
        gym.make(ENV, **options)
    assert list(tmp_path.iterdir()) == []


def test_good_options_make_an_env_that_measures_nothing_yet():
    env = gym.make(ENV, num_threads=available_cpus(), failure_reward=-3, records=False,
                   use_cache=False, confirm_best=False, early_stop=0)
    assert env.unwrapped.session._measurer is None and env.unwrapped.failure_reward == -3
    env.close()
