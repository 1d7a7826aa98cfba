"""The tensor-program scheduling environment."""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ..errors import InvalidConfigError, StepError, TensorGymError
from ..features import FEATURE_MODES, feature_length
from ..features.ast import NODE_TYPES
from ..features.context import N_CONTEXT
from ..features.descriptor import DESCRIPTOR_LENGTH, workload_descriptor
from ..measure.result import MeasureResult
from ..meter import Meter
from ..session import TuningSession
from ..space import Config, ConfigSpace, is_int, short_repr
from ..templates.seeds import seed_configs
from ..workloads import Workload
from .edit import EDIT_MOVES, START_MODES, EditMoves

REWARDS = ("log_speedup", "best_improvement")
AST_MAX_NODES = 64  # loop ASTs of the templates have at most ~45 statement nodes


AST_NODE_FEATURES = len(NODE_TYPES) + N_CONTEXT


def pad_ast(tree: dict) -> dict:
    """The ``ast`` observation: a tree of ``tensorgym.features`` mode ``ast`` padded to
    ``AST_MAX_NODES`` nodes (pre-order, so truncation keeps the outer loops); ``parent`` is -1
    for the root and for padding, ``mask`` marks real nodes."""
    n = min(len(tree["parent"]), AST_MAX_NODES)
    feats = np.zeros((AST_MAX_NODES, AST_NODE_FEATURES), np.float32)
    feats[:n] = tree["node_features"][:n]
    parent = np.full(AST_MAX_NODES, -1, np.int64)
    parent[:n] = tree["parent"][:n]
    mask = np.zeros(AST_MAX_NODES, np.int8)
    mask[:n] = 1
    return {"node_features": feats, "parent": parent, "mask": mask}


ACTION_MODES = ("config", "knob", "edit")


def check_edit_options(action_mode: str, obs_mode: str, start: Optional[str],
                       edit_moves: Optional[str]) -> None:
    """Raise ``TensorGymError`` for ``start`` / ``edit_moves`` outside edit mode, an unknown
    value of either, or an observation edit mode cannot give."""
    if action_mode != "edit":
        given = [n for n, v in (("start", start), ("edit_moves", edit_moves)) if v is not None]
        if given:
            raise TensorGymError(f"{', '.join(given)}: options of action_mode='edit', not of "
                                 f"action_mode={action_mode!r}")
        return
    if start is not None and start not in START_MODES:
        raise TensorGymError(f"unknown start {start!r}; use one of {START_MODES}")
    if edit_moves is not None and edit_moves not in EDIT_MOVES:
        raise TensorGymError(f"unknown edit_moves {edit_moves!r}; use one of {EDIT_MOVES}")
    if obs_mode == "ast":
        raise TensorGymError("action_mode='edit' observes a feature row and the workload "
                             "descriptor: use obs_mode 'relation', 'context' or 'config', not "
                             "'ast'")


class TensorSchedEnv(gym.Env):
    """
    ## Description
    Find a fast schedule for one tensor operator (``workload``) on one ``target``. Each trial
    builds the program a schedule describes, checks it against NumPy and times it on this
    machine's hardware; an episode is one tuning session with a budget of ``budget`` trials.
    This is the problem of "Learning to Optimize Tensor Programs" (Chen et al., NeurIPS 2018).

    ## Action Space
    * ``action_mode="config"`` (default): ``MultiDiscrete(space.dims)``; one step proposes a whole
      schedule (one option index per knob), which is built and measured.
      **Invalid actions raise** ``InvalidConfigError`` before anything is built: an action must
      be a 1-D integer array of shape ``(len(space.knobs),)`` or a list/tuple of that many exact
      integers (Python or NumPy ints; not bools, floats, strings or nested lists), each in
      range. Nothing is measured or counted and the episode goes on as before the call.
    * ``action_mode="knob"``: ``Discrete(max(space.dims))``; one step sets the next knob, and the
      program is measured when the last knob is set. ``action_masks()`` gives the valid options
      of the knob to set (for MaskablePPO).
      **Invalid actions get** ``failure_reward``: an action that is not one exact integer (a
      Python or NumPy int, or a 0-d integer array) or is out of range for the knob to set sets
      nothing, returns ``failure_reward`` with ``info["error"] == "INVALID_ACTION"`` (the reason
      in ``info["error_msg"]``), and counts toward ``max_invalid_actions`` per episode.
    * ``action_mode="edit"``: a walk over schedules, one knob at a time. An episode starts from
      ``start``: ``"reference"`` (default: ``templates.default_config``), ``"seed"`` (one of the
      template's hand-derived seed schedules, ``templates.seeds``, the reference left out; the
      reference where the template has none) or ``"random"`` (uniform over the space), drawn
      with the env's RNG (``reset(seed=...)``); ``reset(options={"start": ...})`` overrides it
      for one episode, and reset's ``info`` gives ``start`` and the start's ``config``. A step
      moves one knob of the current schedule to a neighbouring option and measures the result
      (one trial). ``edit_moves="step"`` (default): ``Discrete(2 * n_knobs)``, action ``2k``
      moves knob ``k`` to its previous option, ``2k + 1`` to its next, in the knob's option
      order (for a split knob, the next factorization in sorted order). ``edit_moves="factor"``:
      a split knob of ``L`` levels gets ``2 (L - 1)`` moves instead, each moving one prime factor
      between two adjacent levels (``inward`` / ``outward``); ``tensorgym.envs.edit`` documents
      both neighbourhoods and ``env.unwrapped.moves`` lists the moves in action order.
      ``action_masks()`` masks the moves that would leave a knob's options. **Invalid actions
      get** ``failure_reward`` as in knob mode (a masked move, an out-of-range one, not one
      exact integer): nothing is measured, ``info["error"] == "INVALID_ACTION"``,
      ``info["edit"]`` is None, and it counts toward ``max_invalid_actions``.
    No exception other than a ``TensorGymError`` subclass leaves ``step``: failures outside the
    action (measurement machinery, records database) raise ``StepError`` with the original
    exception as its cause.

    ## Observation Space
    ``Box`` of loop-AST features of the program just built (``obs_mode``: ``relation`` — the
    paper's context-relation features, the default —, ``context`` or ``config``). They are pure
    functions of the program, never of its measured time. In ``knob`` mode the observation also
    carries the partial choices (``(choice + 1) / size``, 0 for a knob not set yet).
    ``obs_mode="ast"`` gives a ``Dict`` for tree models: ``node_features`` (64 x 72: node-type
    one-hot and the loop's context vector, statement nodes in pre-order), ``parent`` (-1 for the
    root and padding) and ``mask`` (1 for real nodes), plus ``partial`` in knob mode.
    ``reset`` observes the reference schedule (edit mode: the start). In ``edit`` mode the
    observation is the current schedule's feature row (``obs_mode`` ``relation``, ``context`` or
    ``config``; ``ast`` is refused) followed by the workload descriptor
    (``features.descriptor.workload_descriptor``: ``DESCRIPTOR_LENGTH`` non-negative floats
    saying what the operator, its sizes, its cost and the target are), so one policy can act
    across tasks.

    ## Rewards
    * ``log_speedup`` (default): ``log(t_ref / t)``, with ``t_ref`` the time of the reference
      schedule (``templates.default_config``), measured once per device and cached in the records
      database.
    * ``best_improvement``: increase of ``log`` best-so-far throughput, starting from the
      reference; an episode's return is the log speedup of the best program found (0 if none
      beats the reference).
    A program that fails (invalid config, compile error, crash, hang, wrong result) gets
    ``failure_reward`` (default -5 for ``log_speedup``, i.e. worse than 100x slower than the
    reference; 0 for ``best_improvement``). An invalid action in ``knob`` mode gets
    ``failure_reward`` too and sets nothing. Intermediate knob steps give 0.
    In ``edit`` mode ``log_speedup`` is the log speedup over the episode's previous schedule,
    ``log(t_prev) - log(t_new)``, with the reference's time as the first step's ``t_prev``
    (whatever the start: the start is not measured), so an episode's rewards add up to the log
    speedup of its last schedule over the reference when no step fails. A new schedule that
    fails gets ``failure_reward`` and the walk stays where it was (the current schedule and
    ``t_prev`` do not change). ``best_improvement`` means what it means in the other modes.
    ``info`` is config mode's plus ``info["edit"]`` (``{"knob": name, "direction": "down" |
    "up" | "inward" | "outward"}``, and ``"levels"`` for a factor move) and
    ``info["previous_runtime"]`` (the ``t_prev`` of the step).
    With ``early_stop`` on (the session's default), a schedule timed only until it was surely
    that many times slower than the best has a lower bound of its time (``info["early_stop"]``),
    which the reward and the next ``t_prev`` use; ``early_stop=0`` gives full timings.

    ## Episode End
    Terminates when ``budget`` trials have been measured. In ``knob`` and ``edit`` mode the
    episode is truncated by the step whose invalid action is the episode's ``max_invalid_actions``-th
    (default ``budget * len(space.knobs)``), so at most ``budget * len(space.knobs) +
    max_invalid_actions`` steps end any knob-mode episode (``budget + max_invalid_actions`` an
    edit-mode one). A step after the end raises
    ``TensorGymError`` (call ``reset()``).

    ## Arguments
    ``workload`` (registered name, shape key, or ``Workload``), ``target`` (cpu/llvm, opencl,
    cuda), ``budget`` (200), ``reward``, ``obs_mode``, ``action_mode``, ``failure_reward``,
    ``max_invalid_actions`` (knob and edit mode, see Episode End), ``start`` and ``edit_moves``
    (edit mode only: refused in the others), ``render_mode``, and either
    ``session`` (a ``tensorgym.session.TuningSession`` of this task, which the env then steps
    but does not close) or the options of the session it makes: ``records`` (path, ``Records``,
    ``None`` for the default database under the user cache dir, ``False`` for none),
    ``use_cache``, ``measure_options``, ``measurer`` (share one between envs), ``num_threads``
    (CPU threads of parallel loops; 0 = all cores), ``confirm_best``, ``early_stop``,
    ``measure`` ("live" or "replay") with ``dataset``, ``on_miss``, ``dataset_device``,
    ``world``, ``replay_speed`` (tensorgym.dataset.speed) and ``world_seed`` (the field of
    ``on_miss="draw"``'s draws), and ``budget_seconds``.

    ## Measurements
    Each trial is measured by the session's measurer (docs/measurement.md): a would-be best is
    timed again before it counts (``info["confirmed"]``), a kernel surely ``early_stop`` (3) times
    slower than the best gets fewer samples (``info["early_stop"]``; ``info["unchecked"]`` if
    stopped in its first run), and ``info["drift"]`` flags a moving machine. ``measure="replay"``
    answers from a dataset instead (docs/dataset.md): ``info["source"]`` says how,
    ``info["virtual_time"]`` adds up the seconds the trials took when measured, and
    ``budget_seconds`` ends the episode once that is spent.

    The env pickles (so ``AsyncVectorEnv`` works): the copy keeps the episode and the session's
    history, reconnects to the records database and starts its own measurer when it first
    measures. ``env.unwrapped.session`` is the tuning session search agents work on; the env
    reads ``space``, ``workload``, ``target``, ``history``, ``best``, ``trials`` and ``meter``
    through to it.

    ## Version History
    * v0: first version.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, workload: "str | Workload" = "conv2d-C6", target: str = "cpu",
                 budget: int = 200, reward: str = "log_speedup", obs_mode: str = "relation",
                 action_mode: str = "config", failure_reward: Optional[float] = None,
                 max_invalid_actions: Optional[int] = None, render_mode: Optional[str] = None,
                 session: Optional[TuningSession] = None, start: Optional[str] = None,
                 edit_moves: Optional[str] = None, **session_options: Any) -> None:
        if reward not in REWARDS:
            raise TensorGymError(f"unknown reward {reward!r}; use one of {REWARDS}")
        if action_mode not in ACTION_MODES:
            raise TensorGymError(f"unknown action_mode {action_mode!r}; use one of {ACTION_MODES}")
        if obs_mode not in FEATURE_MODES:
            raise TensorGymError(f"unknown obs_mode {obs_mode!r}; use one of {FEATURE_MODES}")
        if not is_int(budget) or budget < 1:
            raise TensorGymError(f"budget must be an integer >= 1, got {budget!r}")
        check_edit_options(action_mode, obs_mode, start, edit_moves)
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise TensorGymError(f"render_mode is None or 'ansi', not {render_mode!r}")
        if failure_reward is not None and (isinstance(failure_reward, bool) or not isinstance(
                failure_reward, (int, float)) or not math.isfinite(failure_reward)):
            raise TensorGymError(f"failure_reward must be a finite number, got "
                                 f"{failure_reward!r}")
        if session is not None and not isinstance(session, TuningSession):
            raise TensorGymError(f"session is a tensorgym.session.TuningSession, not "
                                 f"{type(session).__name__}")
        if session is not None and session_options:
            raise TensorGymError(f"{', '.join(sorted(session_options))}: options of the session, "
                                 "which was given made")
        self.session = session if session is not None else TuningSession(
            workload, target, budget=budget, **session_options)
        self._own_session = session is None
        self.budget = int(budget)
        self.reward_kind = reward
        self.obs_mode = obs_mode
        self.action_mode = action_mode
        self.failure_reward = (failure_reward if failure_reward is not None
                               else (-5.0 if reward == "log_speedup" else 0.0))
        self.render_mode = render_mode
        self._obs_cache = None
        self._configs: dict = {}  # action bytes -> config (config mode)
        self._json: dict = {}  # config index -> its JSON (info["config"])

        n_knobs = len(self.space.knobs)
        if max_invalid_actions is None:
            max_invalid_actions = self.budget * n_knobs
        if not is_int(max_invalid_actions) or max_invalid_actions < 1:
            raise TensorGymError(f"max_invalid_actions must be an integer >= 1, got "
                                 f"{max_invalid_actions!r}")
        self.max_invalid_actions = int(max_invalid_actions)
        self._action_shape = (n_knobs,)
        self.start = start or "reference"
        self._moves = EditMoves(self.space, edit_moves or "step") if action_mode == "edit" else None
        self._seeds: Optional[list[Config]] = None  # edit mode's seed schedules, made on demand
        self._descriptor = workload_descriptor(self.workload, self.target)
        if action_mode == "config":
            self.action_space = spaces.MultiDiscrete(np.array(self.space.dims, dtype=np.int64))
        elif action_mode == "edit":
            self.action_space = spaces.Discrete(len(self._moves))
        else:
            self.action_space = spaces.Discrete(max(self.space.dims))
        # Features are log-scaled magnitudes: non-negative and finite.
        big = np.finfo(np.float32).max
        partial = n_knobs if action_mode == "knob" else 0
        if obs_mode == "ast":
            obs = {"node_features": spaces.Box(0.0, big, (AST_MAX_NODES, AST_NODE_FEATURES),
                                               np.float32),
                   "parent": spaces.Box(-1, AST_MAX_NODES - 1, (AST_MAX_NODES,), np.int64),
                   "mask": spaces.Box(0, 1, (AST_MAX_NODES,), np.int8)}
            if partial:
                obs["partial"] = spaces.Box(0.0, 1.0, (partial,), np.float32)
            self.observation_space = spaces.Dict(obs)
        else:
            extra = partial + (DESCRIPTOR_LENGTH if action_mode == "edit" else 0)
            self.observation_space = spaces.Box(0.0, big, (feature_length(obs_mode) + extra,),
                                                np.float32)
        self._reset_state()

    # ---------------------------------------------------------------- the session's, read here

    @property
    def space(self) -> ConfigSpace:
        return self.session.space

    @property
    def workload(self) -> Workload:
        return self.session.workload

    @property
    def target(self) -> str:
        return self.session.target

    @property
    def history(self) -> list[MeasureResult]:
        return self.session.history

    @property
    def best(self) -> Optional[MeasureResult]:
        return self.session.best

    @property
    def trials(self) -> int:
        return self.session.trials

    @property
    def meter(self) -> Meter:
        return self.session.meter

    @property
    def moves(self) -> tuple:
        """Edit mode's moves (``tensorgym.envs.edit.Move``) in action order; () in the others."""
        return self._moves.moves if self._moves is not None else ()

    def featurize(self, configs: Sequence[Config], mode: Optional[str] = None, **kwargs: Any):
        """``session.featurize`` in the observation's feature mode by default."""
        return self.session.featurize(configs, mode or self.obs_mode, **kwargs)

    # ---------------------------------------------------------------- gymnasium API

    def _reset_state(self) -> None:
        self._partial: list[int] = []
        self.invalid_actions = 0  # this episode's, knob mode
        self._truncated = False
        self._last_config = self.session.reference_config
        self._previous_seconds: Optional[float] = None  # edit mode; None: the reference's

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self._reset_state()
        self.session.reset(seed)
        info = {"trials": 0, "space_size": self.space.size}
        if self.action_mode == "edit":
            start = self._start_of(options)
            self._last_config = self._start_config(start)
            info.update(start=start, config=self._config_json(self._last_config))
        return self._observe(), info

    def _start_of(self, options: Optional[dict]) -> str:
        """The episode's start (``options["start"]`` overrides the env's ``start``)."""
        start = (options or {}).get("start", self.start)
        if start not in START_MODES:
            raise TensorGymError(f"unknown start {start!r}; use one of {START_MODES}")
        return start

    def _start_config(self, start: str) -> Config:
        """An edit episode's first schedule, drawn with the env's RNG."""
        if start == "reference":
            return self.session.reference_config
        if start == "random":
            return self.space.sample(self.np_random, 1)[0]
        seeds = self.seed_schedules()
        return seeds[int(self.np_random.integers(len(seeds)))]

    def seed_schedules(self) -> list[Config]:
        """The template's hand-derived seed schedules of this space (``templates.seeds``, the
        reference left out), or the reference alone where the template has none."""
        if self._seeds is None:
            ref = self.session.reference_config
            seeds = [c for c in seed_configs(self.workload, self.target)
                     if c.space_key == self.space.key and c.index != ref.index]
            self._seeds = seeds or [ref]
        return self._seeds

    def step(self, action):
        if self.trials >= self.budget:
            raise TensorGymError("the trial budget is spent: call reset() to start a new session")
        if self._truncated:
            raise TensorGymError(f"the episode was truncated after {self.invalid_actions} "
                                 "invalid actions: call reset() to start a new one")
        if self.session.spent:
            raise TensorGymError(f"the time budget ({self.session.budget_seconds:g} s) is spent: "
                                 "call reset() to start a new session")
        try:
            if self.action_mode == "knob":
                return self._step_knob(action)
            if self.action_mode == "edit":
                return self._step_edit(action)
            return self._step_config(self._config_of(action))
        except TensorGymError:
            raise
        except Exception as e:  # noqa: BLE001 - the documented contract: one exception family
            raise StepError(f"step failed: {type(e).__name__}: {e}") from e

    def _step_config(self, config: Config):
        best_before = self.best
        result = self.session.measure_valid([config])[0]  # from_choices made it of this space
        self._last_config = config
        reward = self._reward(result, best_before)
        terminated = self.trials >= self.budget or self.session.spent
        return self._observe(), reward, terminated, False, self._info(result)

    def _config_of(self, action: Any):
        """The config of a config-mode action. Integer arrays seen before come from a memo
        (validating an action costs more than a whole replayed step)."""
        key = (action.tobytes(), action.dtype.char) if (
            isinstance(action, np.ndarray) and action.dtype.kind in "iu"
            and action.shape == self._action_shape) else None
        config = self._configs.get(key) if key is not None else None
        if config is None:
            try:
                config = self.space.from_choices(action)
            except InvalidConfigError as e:
                raise InvalidConfigError(f"invalid action {short_repr(action)}: {e}") from None
            if key is not None:
                if len(self._configs) >= 65536:
                    self._configs.clear()
                self._configs[key] = config
        return config

    def _knob_option(self, action: Any) -> "int | str":
        """The option ``action`` sets on the next knob, or why it is invalid."""
        knob = self.space.knobs[len(self._partial)]
        if isinstance(action, np.ndarray) and action.shape == () and action.dtype.kind in "iu":
            action = action.item()
        if not is_int(action):
            return (f"an action is one integer, the option of knob {knob.name}; got "
                    f"{type(action).__name__} {short_repr(action)}")
        if not 0 <= action < knob.size:
            return f"option {action} out of range for knob {knob.name} ({knob.size} options)"
        return int(action)

    def _step_knob(self, action):
        a = self._knob_option(action)
        if isinstance(a, str):
            return self._invalid(a)
        self._partial.append(a)
        if len(self._partial) < len(self.space.knobs):
            return self._observe(), 0.0, False, False, {"trials": self.trials}
        config = self.space.from_choices(self._partial)
        self._partial = []
        return self._step_config(config)

    def _edit_move(self, action: Any) -> "int | str":
        """The move ``action`` makes from the current schedule, or why it is invalid."""
        if isinstance(action, np.ndarray) and action.shape == () and action.dtype.kind in "iu":
            action = action.item()
        if not is_int(action):
            return (f"an action is one integer, a move of the edit space; got "
                    f"{type(action).__name__} {short_repr(action)}")
        if not 0 <= action < len(self._moves):
            return f"move {action} out of range ({len(self._moves)} moves)"
        if not self._moves.masks(self._last_config.choices)[action]:
            m = self._moves.moves[action]
            c = self._last_config.choices[m.knob]
            return (f"move {action} ({m.name} {m.direction}) leaves the options of knob {m.name} "
                    f"(at option {c} of {self.space.knobs[m.knob].size})")
        return int(action)

    def _invalid(self, reason: str, **extra: Any):
        """An invalid knob- or edit-mode action: ``failure_reward``, nothing measured."""
        self.invalid_actions += 1
        self._truncated = self.invalid_actions >= self.max_invalid_actions
        info = {"trials": self.trials, "error": "INVALID_ACTION", "error_msg": reason,
                "invalid_actions": self.invalid_actions, **extra}
        return self._observe(), float(self.failure_reward), False, self._truncated, info

    def _step_edit(self, action):
        a = self._edit_move(action)
        if isinstance(a, str):
            return self._invalid(a, edit=None)
        move = self._moves.moves[a]
        config = self.space.from_choices(self._moves.apply(self._last_config.choices, a))
        previous = (self._previous_seconds if self._previous_seconds is not None
                    else self.session.reference_seconds)
        best_before = self.best
        result = self.session.measure_valid([config])[0]
        if not (result.ok and result.median > 0):
            reward = float(self.failure_reward)
        else:
            reward = (float(math.log(previous) - math.log(result.median))
                      if self.reward_kind == "log_speedup" else self._reward(result, best_before))
            self._last_config, self._previous_seconds = config, result.median
        terminated = self.trials >= self.budget or self.session.spent
        info = self._info(result)
        info.update(edit=move.describe(), previous_runtime=previous)
        return self._observe(), reward, terminated, False, info

    def action_masks(self) -> np.ndarray:
        """Valid actions of the next step (knob mode: the options of the knob to set; edit
        mode: the moves that stay in their knob's options)."""
        if self.action_mode == "config":
            return np.concatenate([np.ones(d, bool) for d in self.space.dims])
        if self.action_mode == "edit":
            return self._moves.masks(self._last_config.choices)
        mask = np.zeros(self.action_space.n, bool)
        mask[: self.space.knobs[len(self._partial)].size] = True
        return mask

    def _reward(self, r: MeasureResult, best_before: Optional[MeasureResult]) -> float:
        if not (r.ok and r.median > 0):
            return float(self.failure_reward)
        # logs subtracted, not of a ratio: a ratio of finite times overflows (a reference of
        # 1e308 s in a doctored dataset) where the difference of their logs cannot
        if self.reward_kind == "log_speedup":
            return float(math.log(self.session.reference_seconds) - math.log(r.median))
        before = max(best_before.gflops if best_before else 0.0, self.session.reference_gflops,
                     5e-324)  # a reference so slow that its GFLOP/s underflow to 0
        return float(max(0.0, math.log(max(r.gflops, before)) - math.log(before)))

    def _observe(self):
        cfg = self._last_config
        if self._obs_cache is None or self._obs_cache[0] is not cfg:  # knob steps re-observe
            self._obs_cache = (cfg, self.session.featurize([cfg], self.obs_mode)[0])
        feats = self._obs_cache[1]
        part = np.zeros(len(self.space.knobs), np.float32)
        for i, c in enumerate(self._partial):
            part[i] = (c + 1) / self.space.knobs[i].size
        if self.obs_mode == "ast":
            obs = pad_ast(feats)
            if self.action_mode == "knob":
                obs["partial"] = part
            return obs
        feats = feats.astype(np.float32)
        if self.action_mode == "edit":
            return np.concatenate([feats, self._descriptor])
        return np.concatenate([feats, part]) if self.action_mode == "knob" else feats

    def _config_json(self, config: Config) -> str:
        text = self._json.get(config.index)
        if text is None:
            if len(self._json) >= 65536:
                self._json.clear()
            text = self._json[config.index] = config.to_json()
        return text

    def _info(self, r: MeasureResult) -> dict:
        return {"runtime": r.median, "gflops": r.gflops, "config": self._config_json(r.config),
                "error": r.error.name, "error_msg": r.error_msg,
                "best_gflops": self.best.gflops if self.best else 0.0,
                "trials": self.trials, "cached": r.cached,
                "build_time": r.build_time, "run_time": r.run_time, "cv": r.cv,
                "confirmed": r.confirmed, "early_stop": r.early_stop,
                "unchecked": r.unchecked, "drift": r.drift,
                "source": "recorded" if r.cached and r.source == "measured" else r.source,
                "virtual_time": self.session.virtual_time}

    def render(self):
        if self.render_mode != "ansi":
            return None
        best = f"{self.best.gflops:.2f} GFLOP/s" if self.best else "none yet"
        return (f"{self.workload.label} on {self.target}: {self.trials}/{self.budget} trials, "
                f"best {best}")

    def close(self) -> None:
        if self._own_session:
            self.session.close()
        super().close()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_own_session"] = True  # a copy owns the copy of its session
        return state
