"""tensorgym.nn: the task tables of the built-in models, checked against the models' own
modules; the epilogue rules on small modules; keys; the CLI's ``list models`` and ``tasks``."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tensorgym.cli import main
from tensorgym.nn import (MODELS, ModelTask, TaskKeyError, extract_tasks,
                          get_model, parse_key)
from tensorgym.nn.models import ModelUnavailableError, _torchvision_models


def test_import_tensorgym_imports_no_torch():
    code = ("import sys, tensorgym, tensorgym.nn, tensorgym.cli; "
            "assert 'torch' not in sys.modules and 'torchvision' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_keys_parse_and_refuse():
    assert parse_key("conv2d:1,64,56,56,64,3,1,1+bias+relu") == \
        ("conv2d", (1, 64, 56, 56, 64, 3, 1, 1), 1, ("bias", "relu"))
    assert parse_key("conv2d:1,32,112,112,32,3,1,1,32+bias+relu6")[2] == 32
    assert parse_key("batch_matmul:12,128,64,128") == ("batch_matmul", (12, 128, 64, 128), 1, ())
    for bad in ("dense:1,2", "conv2d:1,2,3", "dense:1,2,3+bias+swish", "nope:1", "dense:a,b,c"):
        with pytest.raises(TaskKeyError):
            parse_key(bad)
    t = ModelTask("dense", (128, 768, 3072), epilogue=("bias", "gelu"))
    assert t.key == "dense:128,768,3072+bias+gelu" and t.flops == 2 * 128 * 768 * 3072
    assert t.dims == {"ROWS": 128, "IN": 768, "OUT": 3072}
    w = t.workload()
    assert (w.key, w.op, w.epilogue, w.flops) == (t.key, "dense", ("bias", "gelu"), t.flops)
    dw = ModelTask("conv2d", (1, 32, 112, 112, 32, 3, 1, 1), 32, ("bias", "relu6"))
    assert dw.workload().key == dw.key and dw.workload().groups == 32


torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional


@pytest.fixture(scope="module")
def built():
    """name -> (model, table), each traced once for the whole file."""
    try:
        _torchvision_models()
    except ModelUnavailableError as e:
        pytest.skip(str(e))
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            model, x = get_model(name)
            cache[name] = model, extract_tasks(model, x, name)
        return cache[name]
    return get


def by_node(table) -> dict:
    return {node: t for t in table.tasks for node in t.nodes}


@pytest.mark.parametrize("name", list(MODELS))
def test_every_model_matches_its_modules(built, name):
    model, table = built(name)
    convs = {n: m for n, m in model.named_modules() if isinstance(m, nn.Conv2d)}
    linears = {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    attentions = [m for m in model.modules() if isinstance(m, nn.MultiheadAttention)]
    bad_convs = [u for u in table.untunable if u.op == "conv2d"]
    assert table.count("conv2d") + len(bad_convs) == len(convs)
    # an attention's in_proj is a parameter, its out_proj a Linear module
    assert table.count("dense") == len(linears) + len(attentions)
    assert table.count("batch_matmul") == 2 * len(attentions)
    assert not [u for u in table.untunable if u.op != "conv2d"]
    nodes = by_node(table)
    for path, m in convs.items():
        if m.kernel_size[0] != m.kernel_size[1]:
            assert any(u.node == path and "non-square" in u.reason for u in bad_convs)
            continue
        t = nodes[path]
        assert t.dims["IC"] == m.in_channels and t.dims["OC"] == m.out_channels
        assert (t.dims["K"], t.dims["STRIDE"], t.dims["PAD"]) == \
            (m.kernel_size[0], m.stride[0], m.padding[0])
        assert t.groups == m.groups
        if m.bias is not None:
            assert t.epilogue[0] == "bias"
    for path, m in linears.items():
        if path in nodes:  # an attention's out_proj is called as F.linear inside it
            t = nodes[path]
            assert (t.dims["IN"], t.dims["OUT"]) == (m.in_features, m.out_features)
            assert ("bias" in t.epilogue) == (m.bias is not None)
    # one node per instance, none counted twice
    assert sum(len(t.nodes) for t in table.tasks) == table.instances
    assert len(set(nodes)) == table.instances
    for t in table.tasks:
        assert parse_key(t.key) == t.signature
        w = t.workload()
        assert w.key == t.key and w.operator_key == t.operator_key == t.key.split("+")[0]
        assert w.flops == t.flops and w.epilogue == t.epilogue
    assert name in table.markdown() and table.totals().startswith(name)


def test_resnet18(built):
    model, table = built("resnet18")
    assert table.count("conv2d") == 20 and not table.untunable
    stem = table.find("conv2d:1,3,224,224,64,7,2,3+bias+relu")  # bn1 folded: a bias
    assert stem.count == 1 and stem.nodes == ("conv1",)
    down = [t for t in table.tasks if any("downsample" in n for n in t.nodes)]
    assert sum(t.count for t in down) == 3 and all(t.epilogue == ("bias",) for t in down)
    # BasicBlock: conv2 -> bn2 -> += identity -> relu
    res = [t for t in table.tasks if t.epilogue == ("bias", "add", "relu")]
    assert sum(t.count for t in res) == 8 and all(n.endswith("conv2") for t in res for n in t.nodes)
    assert table.find("conv2d:1,64,56,56,64,3,1,1+bias+add+relu").count == 2
    fc = table.find("dense:1,512,1000+bias")
    assert fc.count == 1 and fc.nodes == ("fc",) and fc.workload().op == "dense"
    # the paper's Table 1 layers are among them (operator part), except C3: torchvision's
    # ResNet-18 has no 1x1 64 -> 64 convolution (Table 1 lists one)
    from tensorgym.workloads import WORKLOADS

    ops = {t.operator_key for t in table.tasks}
    assert [n for n, w in WORKLOADS.items() if n.startswith("conv2d-C") and w.key not in ops] \
        == ["conv2d-C3"]


def test_mobilenet_v2_depthwise(built):
    model, table = built("mobilenet_v2")
    dw = [t for t in table.tasks if t.groups != 1]
    assert sum(t.count for t in dw) == 17
    assert all(t.groups == t.dims["IC"] == t.dims["OC"] for t in dw)
    assert all(t.epilogue == ("bias", "relu6") and t.workload().groups == t.groups for t in dw)
    assert table.find("conv2d:1,32,112,112,32,3,1,1,32+bias+relu6").count == 1
    # the projection convs of the blocks with a residual
    assert sum(t.count for t in table.tasks if t.epilogue == ("bias", "add")) == 10


def test_resnext50_grouped(built):
    _, table = built("resnext50")
    grouped = [t for t in table.tasks if t.groups != 1]
    assert sum(t.count for t in grouped) == 16 and all(t.groups == 32 for t in grouped)


def test_inception_v3_reports_non_square_kernels(built):
    model, table = built("inception_v3")
    wide = [m for m in model.modules() if isinstance(m, nn.Conv2d)
            and m.kernel_size[0] != m.kernel_size[1]]
    assert len(table.untunable) == len(wide) > 0
    assert table.count("conv2d") == 94 - len(wide)


def test_bert_layer(built):
    _, table = built("bert_layer")
    # MultiheadAttention computes q, k, v with one fused in_proj (768 -> 2304); torch's default
    # activation is relu; the residual adds follow out_proj and linear2 (dropout is the identity)
    assert [(t.key, t.count) for t in table.tasks] == [
        ("dense:128,768,2304+bias", 1), ("batch_matmul:12,128,64,128", 1),
        ("batch_matmul:12,128,128,64", 1), ("dense:128,768,768+bias+add", 1),
        ("dense:128,768,3072+bias+gelu", 1), ("dense:128,3072,768+bias+add", 1)]


def test_vit_encoder(built):
    _, table = built("vit_b_16_encoder")
    assert {t.key: t.count for t in table.tasks} == {
        "dense:197,768,2304+bias": 12, "batch_matmul:12,197,64,197": 12,
        "batch_matmul:12,197,197,64": 12, "dense:197,768,768+bias+add": 12,
        "dense:197,768,3072+bias+gelu": 12, "dense:197,3072,768+bias+add": 12}


def test_dqn(built):
    _, table = built("dqn")
    assert [t.key for t in table.tasks] == [
        "conv2d:1,4,84,84,32,8,4,0+bias+relu", "conv2d:1,32,20,20,64,4,2,0+bias+relu",
        "conv2d:1,64,9,9,64,3,1,0+bias+relu", "dense:1,3136,512+bias+relu", "dense:1,512,18+bias"]


# ---------------------------------------------------------------- the rules, on small modules

class Rules(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(8, 8, 3, padding=1, bias=True)
        self.bn = nn.BatchNorm2d(8)
        self.b = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.wide = nn.Conv2d(8, 8, (1, 3), padding=(0, 1))
        self.dil = nn.Conv2d(8, 8, 3, padding=2, dilation=2)
        self.asym = nn.Conv2d(8, 8, 3, padding=(1, 2))
        self.w = nn.Parameter(torch.randn(16, 8))

    def forward(self, x):
        y = F.relu6(self.bn(self.a(x)))          # bias then BN: one bias
        z = self.b(y) + x                         # no bias, residual add
        z = torch.relu_(z)
        both = self.b(z)
        w = self.wide(both) + self.dil(both) + self.asym(both)[..., :8]
        t = w.flatten(2).transpose(1, 2)          # (2, 64, 8)
        h = F.gelu(F.linear(t, self.w))           # functional dense, no bias
        q = h.reshape(2, 64, 2, 8).transpose(1, 2)  # (2, 2, 64, 8)
        s = q @ q.transpose(-1, -2)               # 4-D attention scores
        return s.sum() + both.sum() + both.mean()  # `both` has two users: no epilogue


def test_epilogue_rules_on_a_small_module():
    table = extract_tasks(Rules(), torch.randn(2, 8, 8, 8))
    nodes = by_node(table)
    assert nodes["a"].epilogue == ("bias", "relu6")
    assert nodes["b"].epilogue == ("add", "relu")
    assert nodes["b@1"].epilogue == ()  # the second call of b: its output has two users
    reasons = {u.node: u.reason for u in table.untunable}
    assert "non-square kernel 1x3" == reasons["wide"]
    assert "dilation 2,2" in reasons["dil"] and "asymmetric padding 1,2" == reasons["asym"]
    dense = [t for t in table.tasks if t.op == "dense"]
    assert [t.key for t in dense] == ["dense:128,8,16+gelu"]
    assert [t.key for t in table.tasks if t.op == "batch_matmul"] == ["batch_matmul:4,64,8,64"]


# ---------------------------------------------------------------- command line

def test_cli_tasks_and_list_models(capsys, built, tmp_path):
    built("resnet18")  # skip without torchvision
    md = tmp_path / "r18.md"
    assert main(["tasks", "resnet18", "--md", str(md)]) == 0
    out = capsys.readouterr().out
    assert "conv2d:1,3,224,224,64,7,2,3+bias+relu" in out and "| count |" in out
    assert md.read_text() == out
    assert main(["list", "models"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in MODELS)


def test_missing_torchvision_and_untraceable_models_are_one_line(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torchvision", None)  # as if not installed
    assert main(["tasks", "resnet18"]) == 1
    err = capsys.readouterr().err
    assert "pip install 'tensorgym[nn]'" in err and len(err.strip().splitlines()) == 1

    class Branchy(nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x  # data-dependent control flow

    from tensorgym.nn import TraceError

    with pytest.raises(TraceError, match="cannot trace Branchy"):
        extract_tasks(Branchy(), torch.randn(3))


def test_exact_gelu_only_and_no_bias_fold_through_a_reshape():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)
            self.conv = nn.Conv2d(4, 4, 1, bias=False)
            self.bn = nn.BatchNorm2d(4)

        def forward(self, x):
            y = F.gelu(self.fc(x), approximate="tanh")
            z = self.bn(self.conv(y.reshape(1, 4, 4, 4)).reshape(1, 4, 4, 4).transpose(2, 3))
            return z

    table = extract_tasks(M(), torch.randn(1, 8, 8))
    assert [t.key for t in table.tasks] == ["dense:8,8,8+bias", "conv2d:1,4,4,4,4,1,1,0"]


def test_cli_unknown_model_is_one_line(capsys):
    assert main(["tasks", "nosuch"]) == 1
    err = capsys.readouterr().err
    assert "unknown model 'nosuch'" in err and len(err.strip().splitlines()) == 1
