"""``tensorgym.nn.compile``: after a short tune, a model's tuned operators run tensorgym's checked
kernels in this process and the output matches eager PyTorch; operators without a record (or
whose kernel fails the worker's check) keep PyTorch's op and are reported; torch.export sees the
custom op; one OpenMP runtime; no process left behind."""
import os
import warnings

import pytest

torch = pytest.importorskip("torch")

from tensorgym.errors import TensorGymError  # noqa: E402
from tensorgym.measure import LocalMeasurer, MeasureOptions  # noqa: E402
from tensorgym.nn import CompileWarning, compile, get_model  # noqa: E402
from tensorgym.nn.kernels import openmp_copies  # noqa: E402
from tensorgym.nn.scheduler import TaskScheduler, model_tasks_of  # noqa: E402
from tensorgym.session import make_measurer  # noqa: E402

from .proc_tree import descendants, survivors  # noqa: E402

FAST = MeasureOptions(repeat=3, max_repeat=3, min_repeat_ms=1.0, calibrate=False)


def tune(db, model, tasks, per_task=4):
    measurer = make_measurer("cpu", options=FAST, num_threads=torch.get_num_threads())
    try:
        with TaskScheduler(model, tasks, str(db), per_task * len(tasks), batch=per_task,
                           agent="random", measurer=measurer) as s:
            s.run(progress=False)
    finally:
        measurer.close()


@pytest.fixture(scope="module")
def dqn_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("compile") / "dqn.db"
    tune(db, "dqn", model_tasks_of("dqn"))
    return str(db)


def same(model, compiled, shape, n=3):
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _ in range(n):
            x = torch.randn(*shape, generator=gen)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)


def kernel_nodes(graph):
    return [n for n in graph.nodes if n.target is torch.ops.tensorgym.kernel.default]


def test_dqn_runs_checked_kernels_and_matches_eager(dqn_db):
    model, x = get_model("dqn")
    before = set(openmp_copies())  # other tests' imports (xgboost's wheel) may have added some
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)  # every operator has a record
        cm = compile(model, x, dqn_db)
    report = cm.tensorgym_report
    assert [r.node for r in report.replaced] == ["0", "2", "4", "7", "9"] and not report.kept
    assert report.device.endswith(f"/{torch.get_num_threads()}t")
    assert all(len(r.sha256) == 64 and r.kernel_ms > 0 for r in report.replaced)
    assert len(kernel_nodes(cm.graph)) == 5
    same(model, cm, x.shape)
    # compiling and running added no OpenMP runtime: the kernels use one already mapped
    assert set(openmp_copies()) == before
    assert os.path.realpath(report.openmp) in before
    assert not survivors(descendants(os.getpid()))  # the checking measurer is closed


def test_export_sees_the_custom_op(dqn_db):
    model, x = get_model("dqn")
    cm = compile(model, x, dqn_db)
    ep = torch.export.export(cm, (x,))
    assert len(kernel_nodes(ep.graph)) == 5
    same(model, ep.module(), x.shape, n=1)


def test_a_backward_through_a_kernel_raises(dqn_db):
    model, x = get_model("dqn")
    cm = compile(model, x, dqn_db)
    with pytest.raises(RuntimeError, match="inference only"):  # no autograd formula
        cm(x.clone().requires_grad_(True)).sum().backward()
    with torch.no_grad():
        same(model, cm, x.shape, n=1)


def test_an_operator_without_a_record_keeps_pytorch(dqn_db):
    nn = torch.nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(4, 32, 8, 4), nn.ReLU(), nn.Flatten(),
                          nn.Linear(32 * 20 * 20, 10)).eval()
    x = torch.randn(1, 4, 84, 84)
    with pytest.warns(CompileWarning, match="no ok record"):
        cm = compile(model, x, dqn_db)
    report = cm.tensorgym_report
    assert [r.node for r in report.replaced] == ["0"]
    assert [(k.node, k.key) for k in report.kept] == [("3", "dense:1,12800,10+bias")]
    assert "no ok record" in report.kept[0].reason and "3" in report.markdown()
    assert len(kernel_nodes(cm.graph)) == 1
    same(model, cm, x.shape)


def test_the_runner_up_config_stands_in_when_the_best_fails(dqn_db, monkeypatch):
    """A best config that no longer builds in time or fails its check leaves the operator to
    the next-fastest recorded config (kernels.ranked_records), and the report says so."""
    from dataclasses import replace

    from tensorgym.errors import ErrorCode

    real = LocalMeasurer.time_builds
    failed_once: set = set()

    def best_fails(self, workload, configs, builds, opts):
        out = real(self, workload, configs, builds, opts)
        if workload.key in failed_once:
            return out
        failed_once.add(workload.key)
        return [replace(r, error=ErrorCode.WRONG_ANSWER, error_msg="max relative error 1")
                for r in out]

    monkeypatch.setattr(LocalMeasurer, "time_builds", best_fails)
    model, x = get_model("dqn")
    cm = compile(model, x, dqn_db)
    report = cm.tensorgym_report
    assert len(report.replaced) == 5 and not report.kept
    assert all("#2 is used" in r.note and "WRONG_ANSWER" in r.note for r in report.replaced)
    same(model, cm, x.shape, n=1)


def test_a_kernel_that_fails_the_check_is_refused(dqn_db, monkeypatch):
    from dataclasses import replace

    from tensorgym.errors import ErrorCode

    real = LocalMeasurer.time_builds

    def wrong(self, workload, configs, builds, opts):
        out = real(self, workload, configs, builds, opts)
        return [replace(r, error=ErrorCode.WRONG_ANSWER, error_msg="max relative error 1")
                for r in out]

    monkeypatch.setattr(LocalMeasurer, "time_builds", wrong)
    model, x = get_model("dqn")
    with pytest.warns(CompileWarning, match="check failed"):
        cm = compile(model, x, dqn_db)
    assert not cm.tensorgym_report.replaced and len(cm.tensorgym_report.kept) == 5
    assert not kernel_nodes(cm.graph)
    same(model, cm, x.shape, n=1)


def test_another_thread_count_is_rebuilt_and_checked(dqn_db):
    threads = torch.get_num_threads()
    other = 1 if threads > 1 else 2
    if other > (os.cpu_count() or 1):
        pytest.skip("one core: no other thread count to rebuild for")
    model, x = get_model("dqn")
    torch.set_num_threads(other)
    try:
        cm = compile(model, x, dqn_db)
        report = cm.tensorgym_report
        assert report.device.endswith(f"/{other}t") and len(report.replaced) == 5
        assert all(f"rebuilt for {other} threads" in r.note for r in report.replaced)
        same(model, cm, x.shape, n=1)
    finally:
        torch.set_num_threads(threads)


def test_resnet18_with_a_few_tuned_tasks(tmp_path):
    keys = dict(model_tasks_of("resnet18"))
    picked = ["conv2d:1,64,56,56,64,3,1,1+bias+add+relu", "conv2d:1,64,56,56,128,1,2,0+bias",
              "dense:1,512,1000+bias"]
    db = tmp_path / "r18.db"
    tune(db, "resnet18", [(k, keys[k]) for k in picked], per_task=3)
    model, x = get_model("resnet18")
    with pytest.warns(CompileWarning):
        cm = compile(model, x, str(db))
    report = cm.tensorgym_report
    assert sorted({r.key for r in report.replaced}) == sorted(picked)
    assert [r.node for r in report.replaced] == ["layer1.0.conv2", "layer1.1.conv2",
                                                 "layer2.0.downsample.0", "fc"]
    assert len(report.kept) == 21 - 4
    same(model, cm, x.shape, n=2)


def test_clear_errors(tmp_path):
    model, x = get_model("dqn")
    with pytest.raises(Exception, match="does not exist"):
        compile(model, x, str(tmp_path / "none.db"))
    with pytest.raises(Exception, match="CPU only"):
        compile(model, x, str(tmp_path / "none.db"), target="cuda")


def test_bench_model_smoke(dqn_db):
    import json

    from .cli_run import cli

    rc, out, err = cli(["bench-model", "dqn", "--db", dqn_db, "--rounds", "1",
                        "--min-round-ms", "1", "--no-inductor", "--json"])
    assert rc == 0, err
    got = json.loads(out)
    assert set(got["latency_ms"]) == {"tensorgym", "eager"} and got["replaced"] == 5
    assert len(got["tasks"]) == 5 and all(t["ours_ms"] > 0 for t in got["tasks"])
    assert got["output"]["within"] and got["output"]["max_abs"] < 1e-3  # checked against eager
    error = got["output"]["vs_float64"]  # each side's error against the model in float64
    assert 0 <= error["eager"] < 1e-3 and 0 <= error["tensorgym"] < 1e-3
    rc, out, err = cli(["bench-model", "dqn", "--db", dqn_db + ".missing"])
    assert rc == 1 and "does not exist" in err


def test_output_check_compares_both_sides_with_float64_where_the_model_runs_so():
    from tensorgym.nn.bench_cli import output_check

    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    linear = torch.nn.Linear(8, 8).eval()
    halved = lambda t: linear(t).half().float()  # noqa: E731 - a "compiled" side off by fp16
    check = output_check(halved, linear, x)
    assert not check["within"]
    error = check["vs_float64"]  # eager's error is fp32 rounding, the other side's fp16's
    assert error["eager"] < 1e-5 < error["tensorgym"] < 1e-2

    class Float32Only(torch.nn.Module):
        def forward(self, x):
            if x.dtype != torch.float32:
                raise RuntimeError("float32 only")
            return x * 3.0

    check = output_check(lambda t: t * 3.0, Float32Only(), x)  # no float64 run: left out
    assert check["within"] and check["max_abs"] == 0 and "vs_float64" not in check


class Small(torch.nn.Module):
    """Every operator kind: a linear whose GELU follows a reshape, 2-D and 4-D matmuls of two
    activations (packed at run time where the config packs one), a depthwise conv with ReLU6,
    a grouped conv with a folded BatchNorm, a linear whose residual add follows a reshape, the
    same linear whose residual add follows a transpose of a dimension of size 1."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.fc, self.bn = nn.Linear(16, 32), nn.BatchNorm2d(16)
        self.proj = nn.Linear(16, 16)
        self.dw = nn.Conv2d(8, 8, 3, 1, 1, groups=8)
        self.gc = nn.Conv2d(8, 16, 3, 1, 1, groups=2)

    def forward(self, x, a, b, q, k, img, r, r2):
        F = torch.nn.functional
        c = F.relu6(self.dw(img))
        return (F.gelu(self.fc(x).reshape(1, 8, 4, 8)), torch.relu(torch.matmul(a, b)),
                torch.matmul(q, k), torch.relu(self.bn(self.gc(c))),
                self.proj(x).reshape(1, 8, 4, 4) + r,  # a residual add after a reshape
                self.proj(x).transpose(0, 1) + r2)  # ... after a transpose that keeps the order


def test_every_operator_kind_packing_and_layout_ops(tmp_path):
    from tensorgym.nn import extract_tasks

    torch.manual_seed(0)
    model = Small().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
    shapes = [(1, 8, 16), (8, 24), (24, 32), (2, 3, 8, 16), (2, 3, 16, 8), (1, 8, 10, 10),
              (1, 8, 4, 4), (8, 1, 16)]
    args = tuple(torch.randn(*s) for s in shapes)
    tasks = [(t.key, t.count) for t in extract_tasks(model, args).tasks]
    assert len(tasks) == 6 and "dense:8,16,16+bias+add" in dict(tasks)
    tune(tmp_path / "s.db", "small", tasks, per_task=6)
    cm = compile(model, args, str(tmp_path / "s.db"))
    assert len(cm.tensorgym_report.replaced) == 7 and not cm.tensorgym_report.kept
    with torch.no_grad():
        for _ in range(3):
            xs = tuple(torch.randn_like(a) for a in args)
            for got, want in zip(cm(*xs), model(*xs)):
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    with pytest.raises(Exception):  # compiled for these shapes only: refused, not a crash
        cm(*(torch.randn(2, *a.shape[1:]) if a.dim() > 2 else a for a in args))


def test_a_transpose_keeps_the_order_only_where_it_moves_dimensions_of_size_1():
    from tensorgym.nn.rewrite import keeps_order

    class Layouts(torch.nn.Module):
        def forward(self, x):
            return (x.transpose(0, 1), x.transpose(1, 2), x.permute(1, 0, 2), x.permute(2, 0, 1),
                    x.reshape(4, 6))

    gm = torch.export.export(Layouts(), (torch.randn(1, 4, 6),)).module()
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert [keeps_order(n) for n in nodes] == [True, False, True, False, True]


class Attention(torch.nn.Module):
    """Plain attention, then the same with a causal mask (which the two kernels do not do)."""

    def forward(self, q, k, v):
        F = torch.nn.functional
        return F.scaled_dot_product_attention(q, k, v), \
            F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3)


def test_attention_runs_its_two_kernels_with_the_softmax_between(tmp_path):
    from tensorgym.nn import extract_tasks

    torch.manual_seed(0)
    args = tuple(torch.randn(1, 2, 8, 16) for _ in range(3))
    tasks = [(t.key, t.count) for t in extract_tasks(Attention(), args).tasks]
    assert dict(tasks) == {"batch_matmul:2,8,16,8": 2, "batch_matmul:2,8,8,16": 2}
    tune(tmp_path / "a.db", "attention", tasks, per_task=4)
    with pytest.warns(CompileWarning, match="causal attention"):
        cm = compile(Attention(), args, str(tmp_path / "a.db"), attention=True)
    report = cm.tensorgym_report
    assert [r.key for r in report.replaced] == [k for k, _ in tasks]
    assert len(report.kept) == 1 and report.kept[0].reason == "causal attention"
    assert len(kernel_nodes(cm.graph)) == 2
    with torch.no_grad():
        for _ in range(3):
            xs = tuple(torch.randn_like(a) for a in args)
            for got, want in zip(cm(*xs), Attention()(*xs)):
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    fast = compile(Attention(), args, str(tmp_path / "a.db"), attention=True, faster_only=True)
    raced = [r.versus_pytorch for r in fast.tensorgym_report.replaced]
    kept = [k.reason for k in fast.tensorgym_report.kept]
    assert all(v > 1 for v in raced) and len(raced) + 2 * len(kept) == 2 + 2  # 2 kernels each
    assert any("PyTorch's attention is faster" in k for k in kept) or len(raced) == 2
    with pytest.warns(CompileWarning, match="attention=True"):  # off by default
        assert not compile(Attention(), args, str(tmp_path / "a.db")).tensorgym_report.replaced


CLEAN = """
import os, sys, torch
torch.set_num_threads(min(torch.get_num_threads(), len(os.sched_getaffinity(0))))
from tensorgym.nn import compile, get_model
from tensorgym.nn.kernels import openmp_copies
model, x = get_model("dqn")
cm = compile(model, x, sys.argv[1])
with torch.no_grad():
    cm(x)
print(len(cm.tensorgym_report.replaced), len(set(openmp_copies())))
"""


def test_a_process_of_torch_and_compiled_kernels_has_one_openmp_runtime(dqn_db):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", CLEAN, str(dqn_db)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-2:] == ["5", "1"]  # five kernels, one libgomp


def test_more_torch_threads_than_cores_is_a_clear_error(dqn_db, monkeypatch):
    import tensorgym.nn.compiled as compiled

    if torch.get_num_threads() < 2:
        pytest.skip("needs PyTorch on 2 threads or more")
    model, x = get_model("dqn")
    monkeypatch.setattr(compiled, "available_cpus", lambda: torch.get_num_threads() - 1)
    with pytest.raises(TensorGymError, match="torch.set_num_threads"):
        compile(model, x, dqn_db)


@pytest.mark.parametrize("kernel_s,pytorch_s", [(2.0, 1.0), (1.0, 2.0)])
def test_a_kernel_replaces_its_operator_only_where_it_wins(dqn_db, monkeypatch, kernel_s,
                                                           pytorch_s):
    """faster_only=True: the race's verdict decides; here it is injected, so the test
    does not depend on this machine's timing (test_race_times_both_sides times for real)."""
    import tensorgym.nn.compiled as compiled

    monkeypatch.setattr(compiled, "race", lambda kernel, bn=False: (kernel_s, pytorch_s))
    model, x = get_model("dqn")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompileWarning)
        cm = compile(model, x, dqn_db, faster_only=True)
    report = cm.tensorgym_report
    if kernel_s > pytorch_s:
        assert not report.replaced and len(report.kept) == 5 and not kernel_nodes(cm.graph)
        assert all("PyTorch's op is faster here" in k.reason for k in report.kept)
    else:
        assert len(report.replaced) == 5 and not report.kept
        assert all(r.versus_pytorch == 2.0 for r in report.replaced)
        assert "2.00x PyTorch's op" in report.markdown()
    same(model, cm, x.shape)


def test_race_times_both_sides(dqn_db):
    import tensorgym.nn.compiled as compiled

    model, x = get_model("dqn")
    cm = compile(model, x, dqn_db)
    kernel = next(iter(cm.tensorgym_kernels.values()))
    for batch_norm in (False, True):
        ours, theirs = compiled.race(kernel, batch_norm)
        assert 0 < ours < 1 and 0 < theirs < 1
