"""A measurement farm on Ray: ``RayMeasurer(target, address=...)``, the ``Measurer`` protocol.

- Builds are Ray tasks (one CPU each) on the nodes that host a matching device: a CPU kernel is
  compiled for the host's CPU, and the GPU builders ask their device for its limits. In each Ray
  worker they run in a ``LocalMeasurer``'s builder process (``build_timeout``, a crashing
  compiler costs only that process), holding the host's lock shared as on one machine.
- Timing runs in one long-lived actor per device (``DeviceTimer``), keyed by its node and
  runtime arguments, which fix the device fingerprint (target, device name, thread count). The
  actor drives a ``LocalMeasurer``: its ``Child`` worker process (a crashing or hanging kernel
  kills only it; it restarts and the caller gets an error result), the device's lock on that
  host, the calibration kernel. One call at a time: a device never times two kernels at once.
- The caller names the device kind (``cpu/<cpu-model>``, ``cuda/<gpu-name>``, or a whole
  fingerprint); configs spread over every matching device, and each result says which one
  measured it (``extra["device"]``, ``extra["node"]``). Results stream back as they finish
  (``RayMeasurer.measure_iter``); the caller writes them, so its records stay the single writer.
- A node that dies mid-run: its pending builds and timings run again elsewhere, each config's
  result comes back exactly once.

This module imports ray; ``tensorgym`` imports it only where a Ray measurer is asked for.
"""
from __future__ import annotations

import math
import os
import socket
import time
import warnings
from collections import Counter, deque
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Iterator, Optional, Sequence

import ray
from ray.exceptions import ActorDiedError, GetTimeoutError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..errors import ErrorCode, LoweringBugWarning, TensorGymError
from ..hardware.device import Device
from ..hardware.target import get_target
from ..loopast import Program
from ..processes.host import available_cpus
from ..space import Config
from ..workloads import Workload
from .base import (MeasureOptions, MeasurerDefaults, confirm_options, confirmed, stop_bound,
                   with_stop)
from .local import LocalMeasurer
from .result import BuildResult, MeasureResult

ATTEMPTS = 3  # a config lost with its node this many times is reported as an error
CHUNK = 8  # most kernels one timing call takes (one calibration phase)
START_TIMEOUT_S = 120.0  # for a device's actor to start and name its device
LIVENESS_S = 5.0  # with no answer for this long, look for nodes that died
CONNECT_TIMEOUT_S = 10.0  # default deadline for a cluster's address to answer as Ray does
TIMEOUT_ENV = "TENSORGYM_RAY_TIMEOUT"  # overrides it (seconds)
# the HTTP/2 client preface and an empty SETTINGS frame, which a gRPC server answers at once
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def connect(address: "str | None") -> None:
    """Join the Ray cluster at ``address`` ("auto": the one started on this machine with ``ray
    start``; ``host:port`` or ``ray://host:port``), or start a local one (None, unless
    ``RAY_ADDRESS`` names one). An existing connection of this process is kept."""
    if ray.is_initialized():
        return
    reachable(address)
    try:
        ray.init(address=address, include_dashboard=False if address is None else None,
                 log_to_driver=True)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise TensorGymError(f"cannot join the Ray cluster at {address!r}: {e}; start one with "
                             "`ray start --head` (docs/distributed.md)") from None


def connect_timeout() -> float:
    """The deadline for a cluster's address to answer as Ray does: ``$TENSORGYM_RAY_TIMEOUT``
    seconds, else ``CONNECT_TIMEOUT_S``."""
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    try:
        seconds = float(text) if text else CONNECT_TIMEOUT_S
    except ValueError:
        seconds = math.nan
    if not 0 < seconds < math.inf:
        raise TensorGymError(f"${TIMEOUT_ENV} is a number of seconds above 0, not {text!r}")
    return seconds


def reachable(address: "str | None", timeout: "float | None" = None) -> None:
    """Refuse within ``timeout`` seconds (``connect_timeout()``) an address ``host:port`` (or
    ``ray://host:port``) where no Ray cluster answers: nothing listens there, or what listens
    does not answer the HTTP/2 handshake of Ray's gRPC servers (a silent socket, an HTTP/1
    server). Ray itself keeps retrying such an address for minutes. None and "auto" are Ray's
    to find; with ``RAY_USE_TLS`` set only the TCP connection is checked."""
    if address is None or address == "auto":
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise TensorGymError(f"a Ray address is 'auto', host:port or ray://host:port, not "
                             f"{address!r}")
    timeout = connect_timeout() if timeout is None else timeout
    deadline = time.monotonic() + timeout
    start = "start one with `ray start --head` (docs/distributed.md)"
    try:
        s = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
    except (OSError, ValueError) as e:
        raise TensorGymError(f"cannot join the Ray cluster at {address!r}: nothing answers "
                             f"there ({e}); {start}") from None
    with s:
        if os.environ.get("RAY_USE_TLS", "0").lower() in ("0", "false", ""):
            head = _h2_settings(s, deadline)
            if head[3:4] != b"\x04":  # not an HTTP/2 SETTINGS frame
                got = (f"answered {head[:40]!r}" if head else
                       f"said nothing within {timeout:g} s (${TIMEOUT_ENV})")
                raise TensorGymError(f"cannot join the Ray cluster at {address!r}: it accepts "
                                     f"connections but is not a Ray cluster (it {got} to a gRPC "
                                     f"handshake); {start}")


def _h2_settings(s: socket.socket, deadline: float) -> bytes:
    """The first bytes the server at ``s`` answers to an HTTP/2 client preface, by
    ``deadline``: a gRPC server's begin with its SETTINGS frame (9 bytes, type 4)."""
    head = b""
    try:
        s.sendall(H2_PREFACE)
        while len(head) < 9 and (left := deadline - time.monotonic()) > 0:
            s.settimeout(left)
            chunk = s.recv(64)
            if not chunk:
                break
            head += chunk
    except OSError:  # a timeout, or a reset by a server that took the preface for garbage
        pass
    return head


def node_runtime_kwargs(target: str, runtime_kwargs: dict) -> dict:
    """Runtime arguments made explicit on a node. Ray sets ``OMP_NUM_THREADS=1`` in its
    workers, which the CPU runtime would take for its thread count: name the node's cores."""
    if get_target(target).kind == "cpu" and not runtime_kwargs.get("num_threads"):
        return {**runtime_kwargs, "num_threads": available_cpus()}
    return dict(runtime_kwargs)


@dataclass(frozen=True)
class RayDevice:
    """One device slot of the cluster, timed by the actor ``actor_name`` on node ``node_id``."""

    node_id: str
    node_ip: str
    fingerprint: str  # what records are keyed by
    runtime_kwargs: dict = field(compare=False, hash=False)
    actor_name: str = ""

    @property
    def device(self) -> Device:
        return replace(Device.parse(self.fingerprint), node=self.node_id)

    @property
    def kind(self) -> str:
        """What a request names (``Device.request_kind``): ``cpu/<model>``, ``cuda/<name>``,
        ``opencl/<name>``."""
        return Device.parse(self.fingerprint).request_kind

    @property
    def label(self) -> str:
        """Unique in the cluster: the fingerprint, the node, the device index (GPUs)."""
        index = self.runtime_kwargs.get("device_index")
        return (f"{self.fingerprint}@{self.node_ip}/{self.node_id[:8]}"
                + (f"#{index}" if index is not None else ""))


# ---------------------------------------------------------------- on the nodes


class DeviceTimer:
    """The timing actor of one device: one call at a time, each through a ``LocalMeasurer``
    (one per set of options, for its worker's inputs and calibration). ``windows`` are the
    (start, end) wall-clock stamps of every kernel it timed."""

    def __init__(self, target: str, runtime_kwargs: dict) -> None:
        self.target = target
        self.runtime_kwargs = node_runtime_kwargs(target, runtime_kwargs)
        self._measurers: dict[MeasureOptions, LocalMeasurer] = {}
        self.windows: list[tuple[float, float]] = []

    def describe(self) -> dict:
        fingerprint = get_target(self.target).device_fingerprint(**self.runtime_kwargs)
        return {"node_id": ray.get_runtime_context().get_node_id(),
                "node_ip": ray.util.get_node_ip_address(), "fingerprint": fingerprint,
                "runtime_kwargs": self.runtime_kwargs}

    def time(self, workload: Workload, configs: list[Config], base: MeasureOptions,
             opts: MeasureOptions, *builds: BuildResult) -> list[MeasureResult]:
        m = self._measurers.get(base)
        if m is None:
            if len(self._measurers) >= 4:  # each holds a worker process
                self._measurers.pop(next(iter(self._measurers))).close()
            m = self._measurers[base] = LocalMeasurer(self.target, base, **self.runtime_kwargs)
        out = m.time_builds(workload, list(configs), list(builds), opts)
        self.windows += [r.extra["timed"] for r in out if "timed" in r.extra]
        return out

    def timed_windows(self) -> list[tuple[float, float]]:
        return list(self.windows)


_DeviceTimerActor = ray.remote(DeviceTimer)
# Handles of the timing actors this process started or found: a named actor lives while a
# handle does, so they stay for later measurers of this process's Ray job.
_TIMERS: dict[str, Any] = {}
_BUILDERS: dict[tuple, LocalMeasurer] = {}  # per Ray worker process: its builder process stays up


@ray.remote(num_cpus=1, max_retries=0, num_returns=2)
def _build(target: str, runtime_kwargs: dict, options: MeasureOptions, method: str,
           args: tuple) -> tuple[BuildResult, BuildResult]:
    """Build one kernel; returns (the result without program and binary, the whole result):
    the caller reads the first, the timing actor gets the second from the object store."""
    key = (target, tuple(sorted(runtime_kwargs.items())), options)
    if key not in _BUILDERS:
        _BUILDERS[key] = LocalMeasurer(target, replace(options, n_parallel=1), **runtime_kwargs)
    with warnings.catch_warnings():  # a lowering bug is reported by the caller, from the result
        warnings.simplefilter("ignore", LoweringBugWarning)
        b = _BUILDERS[key].build_all(method, [args])[0]
    return replace(b, program=None, binary=None), b


# ---------------------------------------------------------------- the caller's side


def _alive_nodes() -> list[dict]:
    return [n for n in ray.nodes() if n.get("Alive")]


def _device_slots(target: str, runtime_kwargs: dict, resources: dict) -> list[dict]:
    """The runtime arguments of each device of ``target`` a node's resources promise: one CPU
    (or OpenCL host device) per node with CPUs, one CUDA device per GPU."""
    if get_target(target).kind == "cuda":
        return [{**runtime_kwargs, "device_index": i} for i in range(int(resources.get("GPU", 0)))]
    return [dict(runtime_kwargs)] if resources.get("CPU", 0) >= 1 else []


def _actor_name(node_id: str, target: str, runtime_kwargs: dict) -> str:
    args = ",".join(f"{k}={v}" for k, v in sorted(runtime_kwargs.items()))
    return f"tensorgym-timer/{node_id}/{target}/{args}"


def _timer(node_id: str, target: str, kwargs: dict) -> tuple[str, Any]:
    """The name and handle of the device's timing actor, started on ``node_id`` if need be.
    The first handle is kept: a named actor ends when its creator's handle goes."""
    name = _actor_name(node_id, target, kwargs)
    if name not in _TIMERS:
        _TIMERS[name] = _DeviceTimerActor.options(
            name=name, get_if_exists=True, num_cpus=0, max_restarts=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        ).remote(target, kwargs)
    return name, _TIMERS[name]


def discover(target: str, runtime_kwargs: dict) -> tuple[list[RayDevice], list[str]]:
    """Every device of ``target`` in the cluster, each with its timing actor started (or
    found: they live as long as this process's Ray job), and a line per device that could not
    start."""
    slots = [(node, kwargs) for node in _alive_nodes()
             for kwargs in _device_slots(target, runtime_kwargs, node["Resources"])]
    devices, problems = [], []
    for attempt in range(2):  # an actor of an earlier measurer that died is started anew
        started = [(node, kwargs, *_timer(node["NodeID"], target, kwargs))
                   for node, kwargs in slots]
        refs = [actor.describe.remote() for *_, actor in started]
        slots = []
        for (node, kwargs, name, _), ref in zip(started, refs):
            try:
                d = ray.get(ref, timeout=START_TIMEOUT_S)
            except ActorDiedError as e:
                _TIMERS.pop(name, None)
                if attempt == 0:
                    slots.append((node, kwargs))
                else:
                    problems.append(f"node {node['NodeManagerAddress']}: {_short(e)}")
                continue
            except (RayError, GetTimeoutError) as e:
                problems.append(f"node {node['NodeManagerAddress']}: {target} unavailable: "
                                f"{_short(e)}")
                continue
            devices.append(RayDevice(d["node_id"], d["node_ip"], d["fingerprint"],
                                     d["runtime_kwargs"], name))
        if not slots:
            break
    return devices, problems


def _short(e: BaseException) -> str:
    cause = getattr(e, "cause", None) or e
    return f"{type(cause).__name__}: {cause}".strip().splitlines()[-1][:300]


def cluster_summary(devices: Sequence[RayDevice], problems: Sequence[str]) -> str:
    """The cluster's nodes (their CPUs, GPUs and accelerator types) and devices, one a line."""
    lines = []
    for n in _alive_nodes():
        r = n["Resources"]
        accel = [k.split(":", 1)[1] for k in r if k.startswith("accelerator_type:")]
        lines.append(f"  node {n['NodeManagerAddress']} ({n['NodeID'][:8]}): "
                     f"{int(r.get('CPU', 0))} CPUs, {int(r.get('GPU', 0))} GPUs"
                     + (f" ({', '.join(accel)})" if accel else ""))
        lines += [f"    {d.kind}  [{d.fingerprint}]" for d in devices if d.node_id == n["NodeID"]]
    return "\n".join(lines + [f"  {p}" for p in problems])


class RayRunner:
    """Measures through the Ray cluster at ``address`` on every device of kind ``device``
    (None: every device of ``target``); they must share one fingerprint (``self.device``), as
    measurements are only comparable on one. Raises ``TensorGymError`` listing the cluster's
    devices when none matches."""

    def __init__(self, target: str, options: MeasureOptions, runtime_kwargs: dict,
                 address: "str | None" = None, device: "str | None" = None) -> None:
        self.target = get_target(target).kind
        self.options = options
        connect(address)
        found, problems = discover(self.target, runtime_kwargs)
        want = device or self.target
        self.devices = [d for d in found if want in (self.target, d.kind, d.fingerprint)]
        if not self.devices:
            raise TensorGymError(f"no {self.target} device of kind {want!r} in the Ray "
                                 f"cluster; it has:\n{cluster_summary(found, problems)}")
        prints = sorted({d.fingerprint for d in self.devices})
        if len(prints) > 1:
            raise TensorGymError(
                f"the Ray cluster's devices of kind {want!r} differ ({', '.join(prints)}); "
                "measurements are only comparable on one: name a whole fingerprint as the "
                "device (or set the thread count)")
        self.device = prints[0]
        self._actors = {d.label: _TIMERS[d.actor_name] for d in self.devices}
        # one build slot per CPU of each node that hosts a device, built with its arguments
        cpus = {n["NodeID"]: int(n["Resources"].get("CPU", 0)) for n in _alive_nodes()}
        self.build_nodes = {d.node_id: d.runtime_kwargs for d in reversed(self.devices)}
        self.slots = {node: cpus.get(node, 0) for node in self.build_nodes}
        if not any(self.slots.values()):
            raise TensorGymError("the nodes of the matching devices have no CPUs for builds; "
                                 "start them with some (`ray start --num-cpus=N`)")

    def measure_iter(self, workload: Workload, configs: Sequence[Config], opts: MeasureOptions,
                     seconds: "dict[str, float] | None" = None, method: str = "build",
                     args: "Sequence[tuple] | None" = None) -> Iterator[tuple[int, MeasureResult]]:
        """``(index into configs, result)`` as each finishes. ``method``/``args`` build
        something else than ``(workload, config)`` (``build_program``)."""
        calls = list(args) if args is not None else [(workload, c) for c in configs]
        return _Batch(self, workload, list(configs), opts, method, calls).run(seconds)

    def timed_windows(self) -> dict[str, list[tuple[float, float]]]:
        """Every live device's timed (start, end) stamps (its actor's, since it started)."""
        out = {}
        for label, actor in self._actors.items():
            try:
                out[label] = ray.get(actor.timed_windows.remote(), timeout=30)
            except (RayError, GetTimeoutError):
                pass
        return out

    def forget(self, label: str = "") -> None:
        """Drop the device ``label`` (its actor died) and every device and build node of a
        node that is no longer alive."""
        alive = {n["NodeID"] for n in _alive_nodes()}
        gone = [d.label for d in self.devices if d.label == label or d.node_id not in alive]
        for lost in gone:
            self._actors.pop(lost, None)
        self.devices = [d for d in self.devices if d.label not in gone]
        for node in [n for n in self.build_nodes if n not in alive]:
            del self.build_nodes[node], self.slots[node]

    def close(self) -> None:
        """The actors stay for other measurers of this Ray job (they end with it)."""
        self._actors.clear()


class RayMeasurer(MeasurerDefaults):
    """The ``Measurer`` protocol on a Ray cluster (``address``: None starts a local one, "auto"
    joins the one started on this machine, or ``host:port`` / ``ray://host:port``), on every
    device of kind ``device`` (``cpu/<cpu-model>``, ``cuda/<gpu-name>``, a fingerprint; None:
    any of ``target``). Results stream back as they finish (``measure_iter``); docs/distributed.md.
    The driver needs no device of its own."""

    def __init__(self, target: str = "cpu", options: "MeasureOptions | None" = None,
                 address: "str | None" = None, device: "str | None" = None,
                 **runtime_kwargs: Any) -> None:
        self.target = get_target(target).kind
        self.options = options or MeasureOptions()
        self.runtime_kwargs = runtime_kwargs
        self.address, self.device_request = address, device
        self.runner = RayRunner(self.target, self.options, runtime_kwargs, address, device)
        self.seconds = {"build": 0.0, "run": 0.0}  # wall time in build and timing phases

    @property
    def device(self) -> str:
        return self.runner.device

    @property
    def devices(self) -> list[RayDevice]:
        """The cluster's devices this measurer times on (all of one fingerprint)."""
        return list(self.runner.devices)

    def measure(self, workload: Workload, configs: Sequence[Config],
                stop_slower_than: float = 0.0, early_stop: float = 0.0) -> list[MeasureResult]:
        out: list = [None] * len(configs)
        for i, r in self.measure_iter(workload, configs, stop_slower_than, early_stop):
            out[i] = r
        return out

    def measure_iter(self, workload: Workload, configs: Sequence[Config],
                     stop_slower_than: float = 0.0,
                     early_stop: float = 0.0) -> Iterator[tuple[int, MeasureResult]]:
        """Results as each comes back (any order); the batch's fastest lowers the bound of the
        chunks timed after it came back."""
        opts = with_stop(self.options, stop_slower_than, early_stop)
        yield from self.runner.measure_iter(workload, list(configs), opts, self.seconds)

    def confirm(self, workload: Workload, result: MeasureResult) -> MeasureResult:
        again = next(self.runner.measure_iter(workload, [result.config],
                                              confirm_options(self.options), self.seconds))[1]
        return confirmed(result, again)

    def run_program(self, workload: Workload, program: Program, config: Config) -> MeasureResult:
        """Measure a hand-built loop AST on the cluster."""
        return next(self.runner.measure_iter(workload, [config], self.options, self.seconds,
                                             "build_program", [(program,)]))[1]

    def on_device_node(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` as a Ray task on the node of this measurer's first device (a
        re-measurement beside the vendor library must run on the device it compares)."""
        return on_node(fn, self.runner.devices[0].node_id, *args)

    def describe(self) -> dict:
        return {"target": self.target, "device": self.device, **asdict(self.options),
                "runner": "ray"}

    def close(self) -> None:
        self.runner.close()

    def __deepcopy__(self, memo: dict) -> "RayMeasurer":
        return self

    def __reduce__(self):
        return (_new_ray, (self.target, self.options, self.address, self.device_request,
                           self.runtime_kwargs))


def _new_ray(target: str, options: MeasureOptions, address: "str | None",
             device: "str | None", runtime_kwargs: dict) -> RayMeasurer:
    return RayMeasurer(target, options, address, device, **runtime_kwargs)


class _Batch:
    """One ``measure_iter`` call: builds pulled onto free CPU slots of the build nodes, built
    kernels handed to idle devices in chunks, configs of a lost node or device run again."""

    def __init__(self, runner: RayRunner, workload: Workload, configs: list[Config],
                 opts: MeasureOptions, method: str, calls: list[tuple]) -> None:
        self.r, self.workload, self.configs, self.opts = runner, workload, configs, opts
        self.method, self.calls = method, calls
        self.todo = deque(range(len(configs)))
        self.attempts = [0] * len(configs)
        self.summaries: dict[int, BuildResult] = {}
        self.building: dict[Any, tuple[int, str, Any]] = {}  # summary ref -> (i, node, full)
        self.busy: Counter = Counter()  # build slots in use per node
        self.built: deque[tuple[int, Any]] = deque()  # (i, full ref) waiting for a device
        self.timing: dict[Any, tuple[RayDevice, list[tuple[int, Any]]]] = {}
        self.leader: dict[str, int] = {}  # kernel key -> the config whose run times it
        self.followers: dict[int, list[int]] = {}
        self.out: list[Optional[MeasureResult]] = [None] * len(configs)
        self.fastest = math.inf  # median of the fastest kernel timed in full so far

    def run(self, seconds: "dict[str, float] | None") -> Iterator[tuple[int, MeasureResult]]:
        try:
            while any(r is None for r in self.out):
                self._submit()
                t0 = time.perf_counter()
                phase = "run" if self.timing else "build"
                ready, _ = ray.wait([*self.building, *self.timing], num_returns=1,
                                    timeout=LIVENESS_S)
                if seconds is not None:
                    seconds[phase] += time.perf_counter() - t0
                if not ready:
                    yield from self._reap_dead_nodes()
                    continue
                ref = ready[0]
                yield from self._built(ref) if ref in self.building else self._timed(ref)
        finally:
            for ref in self.building:
                ray.cancel(ref, force=True)

    def _submit(self) -> None:
        for node, kwargs in self.r.build_nodes.items():
            while self.todo and self.busy[node] < self.r.slots[node]:
                i = self.todo.popleft()
                summary, full = _build.options(
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
                ).remote(self.r.target, kwargs, self.r.options, self.method, self.calls[i])
                self.building[summary] = (i, node, full)
                self.busy[node] += 1
        busy = {d.label for d, _ in self.timing.values()}
        idle = [d for d in self.r.devices if d.label not in busy]
        waiting = len(self.built)
        for d in idle:
            if not self.built:
                break
            n = min(CHUNK, max(1, math.ceil(waiting / len(idle))))
            chunk = [self.built.popleft() for _ in range(min(n, len(self.built)))]
            # the batch's fastest so far bounds the chunk; within it, the actor's Measurer
            # lowers the bound further as it times the chunk's kernels in turn
            opts = replace(self.opts, stop_slower_than=stop_bound(
                self.opts.stop_slower_than, self.opts.early_stop, self.fastest))
            ref = self.r._actors[d.label].time.remote(
                self.workload, [self.configs[i] for i, _ in chunk], self.r.options, opts,
                *[full for _, full in chunk])
            self.timing[ref] = (d, chunk)
        if not self.building and not self.timing:  # work left, nowhere to run it
            raise TensorGymError(f"every {self.r.device} device of the Ray cluster was lost; "
                                 f"{sum(r is not None for r in self.out)} of {len(self.out)} "
                                 "results were returned")

    def _reap_dead_nodes(self) -> list[tuple[int, MeasureResult]]:
        """Work in flight on a node Ray no longer lists as alive runs again elsewhere, even if
        no failure has reached this process yet (a late answer is then ignored)."""
        alive = {n["NodeID"] for n in _alive_nodes()}
        out = []
        for ref, (i, node, _) in list(self.building.items()):
            if node not in alive:
                del self.building[ref]
                self.busy[node] -= 1
                ray.cancel(ref, force=True)
                out += self._again([i], TensorGymError(f"node {node[:8]} died"))
        for ref, (device, chunk) in list(self.timing.items()):
            if device.node_id not in alive:
                del self.timing[ref]
                out += self._again([i for i, _ in chunk],
                                   TensorGymError(f"node {device.node_id[:8]} died"))
        self.r.forget()
        return out

    def _built(self, ref: Any) -> list[tuple[int, MeasureResult]]:
        i, node, full = self.building.pop(ref)
        self.busy[node] -= 1
        try:
            b = ray.get(ref)
        except RayError as e:  # its worker or node died: build it again, elsewhere if need be
            self.r.forget()
            return self._again([i], e)
        self.summaries[i] = b
        if b.lowering_bug:
            warnings.warn(b.error_msg.strip(), LoweringBugWarning, stacklevel=4)
        if not b.ok:
            return self._emit(i, _build_error(self.workload, self.configs[i], b))
        first = self.leader.setdefault(b.key, i) if b.key else i
        if first != i:  # the same kernel as an earlier config: timed once
            if self.out[first] is not None:
                return self._emit(i, self._follow(first, i))
            self.followers.setdefault(first, []).append(i)
            return []
        self.built.append((i, full))
        return []

    def _timed(self, ref: Any) -> list[tuple[int, MeasureResult]]:
        device, chunk = self.timing.pop(ref)
        try:
            results = ray.get(ref)
        except RayError as e:  # the device's actor or node died: time these elsewhere
            self.r.forget(device.label)
            return self._again([i for i, _ in chunk], e)
        out = []
        for (i, _), r in zip(chunk, results):
            if r.ok and not r.early_stop:
                self.fastest = min(self.fastest, r.median)
            out += self._emit(i, replace(r, config=self.configs[i], extra={
                **r.extra, "device": device.label, "node": device.node_id}))
        return out

    def _again(self, indices: list[int], error: BaseException) -> list[tuple[int, MeasureResult]]:
        out = []
        for i in indices:
            self.attempts[i] += 1
            if self.attempts[i] < ATTEMPTS:
                self.todo.append(i)
            else:
                out += self._emit(i, MeasureResult(
                    self.configs[i], (), ErrorCode.UNKNOWN_ERROR,
                    f"failed on Ray {ATTEMPTS} times (a lost node or worker, or an error in "
                    f"the task): {_short(error)}",
                    flops=self.workload.flops, timestamp=time.time()))
        return out

    def _follow(self, first: int, i: int) -> MeasureResult:
        r = self.out[first]
        return replace(r, config=self.configs[i], build_time=self.summaries[i].time,
                       extra={**r.extra, "same_kernel_as": self.configs[first].index})

    def _emit(self, i: int, result: MeasureResult) -> list[tuple[int, MeasureResult]]:
        if self.out[i] is not None:  # never twice
            return []
        self.out[i] = result
        out = [(i, result)]
        for f in self.followers.pop(i, []):
            out += self._emit(f, self._follow(i, f))
        return out


def _build_error(workload: Workload, config: Config, b: BuildResult) -> MeasureResult:
    extra: dict = {"compile_cache": True} if b.cached else {}
    if b.compile_info:
        extra["compile"] = b.compile_info
    return MeasureResult(config, (), b.error, b.error_msg, workload.flops, b.time,
                         timestamp=time.time(), extra=extra)


# ---------------------------------------------------------------- whole runs as tasks


def run_tasks(fn: Callable[..., Any], calls: Sequence[tuple], on_done: Callable[[int, Any], None],
              desc: str = "", num_cpus: float = 1) -> list[tuple[int, str]]:
    """``fn(*call)`` for every call as a Ray task (run again on another node if its node dies),
    with one progress bar; ``on_done(i, value)`` runs here as each finishes. Returns
    ``(i, error)`` for the calls that raised (the others are done)."""
    from tqdm import tqdm

    remote = ray.remote(fn).options(num_cpus=num_cpus, max_retries=ATTEMPTS,
                                    retry_exceptions=False)
    pending = {remote.remote(*call): i for i, call in enumerate(calls)}
    failed = []
    with tqdm(total=len(calls), desc=desc, unit="run", dynamic_ncols=True) as bar:
        while pending:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            i = pending.pop(ref)
            try:
                value = ray.get(ref)
            except RayError as e:
                failed.append((i, _short(e)))
            else:
                on_done(i, value)
            bar.update(1)
    return failed


def device_node(target: str, runtime_kwargs: dict, device: "str | None" = None) -> tuple[str, str]:
    """(node id, fingerprint) of a node hosting a device of ``target`` (kind ``device``)."""
    r = RayRunner(target, MeasureOptions(), runtime_kwargs, None, device)
    return r.devices[0].node_id, r.device


def on_node(fn: Callable[..., Any], node_id: str, *args: Any) -> Any:
    """``fn(*args)`` as a Ray task on the node ``node_id`` (a whole-task remeasure next to the
    vendor library must run on the device it compares)."""
    remote = ray.remote(fn).options(
        num_cpus=1, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))
    return ray.get(remote.remote(*args))
