import json
import pickle

import numpy as np
import pytest

from tensorgym.errors import InvalidConfigError
from tensorgym.lower import lower
from tensorgym.space import ConfigSpace, SpaceKey, factorizations
from tensorgym.templates import default_config, space_for, space_of
from tensorgym.workloads import WORKLOADS, conv2d, get_workload

from .conftest import SMALL_WORKLOADS


def test_factorizations_are_ordered_and_complete():
    f = factorizations(12, 3)
    assert all(a * b * c == 12 for a, b, c in f)
    assert len(f) == len(set(f)) == 18  # 12 = 2^2 * 3: C(4,2) * C(3,2)
    pow2 = factorizations(12, 3, "pow2")
    assert all((b & (b - 1)) == 0 and (c & (c - 1)) == 0 for _, b, c in pow2)
    assert set(pow2) < set(f)


def test_c6_cpu_space_is_large():
    space = space_for(get_workload("conv2d-C6"), "cpu")
    assert space.size >= 10**6
    assert "ConfigSpace conv2d/cpu" in str(space)


@pytest.mark.parametrize("w", SMALL_WORKLOADS + [WORKLOADS["conv2d-C6"]], ids=lambda w: w.key)
def test_index_config_round_trip(w, rng):
    space = space_for(w, "cpu")
    for c in space.sample(rng, 50):
        assert space.get(c.index) == c
        assert space.from_choices(c.choices).index == c.index
        assert space.from_json(c.to_json()) == c
        assert space.from_json(json.loads(c.to_json())) == c
    assert space.get(0).index == 0 and space.get(space.size - 1).index == space.size - 1


def test_json_stores_values_not_indices():
    space = space_for(get_workload("conv2d-C6"), "cpu")
    c = space.get(123456)
    obj = json.loads(c.to_json())
    assert obj["space"] == "conv2d/cpu"
    assert obj["knobs"]["tile_oc"] == list(c["tile_oc"])
    assert list(obj["knobs"]) == sorted(obj["knobs"])  # stable text


def test_sampling_is_seeded(rng):
    space = space_for(get_workload("conv2d-C6"), "cpu")
    a = space.sample(np.random.default_rng(7), 20)
    b = space.sample(np.random.default_rng(7), 20)
    assert a == b
    u = space.sample_unique(rng, 100)
    assert len({c.index for c in u}) == 100


def test_neighbors_differ_in_one_knob(rng):
    space = space_for(get_workload("matmul-1024"), "cpu")
    c = space.sample(rng, 1)[0]
    nbrs = list(space.neighbors(c))
    assert len(nbrs) == sum(d - 1 for d in space.dims)
    for n in nbrs:
        assert sum(a != b for a, b in zip(n.choices, c.choices)) == 1
    r = space.random_neighbor(c, rng)
    assert sum(a != b for a, b in zip(r.choices, c.choices)) == 1


def test_batch_neighbors_are_valid_configs_one_knob_away(rng):
    """``random_neighbors`` builds configs without ``from_choices``' checks: each must still be
    exactly the config its choices give, one knob away, and every movable knob must move."""
    space = space_for(get_workload("conv2d-C6"), "cpu")
    start = space.sample(rng, 400)
    moved = set()
    for c, r in zip(start, space.random_neighbors(start, rng)):
        space.validate(r)  # values and index are those its choices give
        diff = [i for i, (a, b) in enumerate(zip(r.choices, c.choices)) if a != b]
        assert len(diff) == 1
        moved.add(diff[0])
    assert moved == {i for i, d in enumerate(space.dims) if d > 1}


def test_indices_past_int64_are_exact(rng):
    """A space of more than 2**63 configs: indices are Python integers, not wrapped int64s."""
    from tensorgym.space import Knob

    space = ConfigSpace("big", tuple(Knob(f"k{i}", tuple(range(97))) for i in range(12)))
    assert space.size > 2 ** 63
    for c in space.sample(rng, 20) + space.random_neighbors(space.sample(rng, 20), rng):
        space.validate(c)
        assert space.get(c.index) == c


def test_bad_configs_raise_clear_errors():
    space = space_for(get_workload("matmul-1024"), "cpu")
    with pytest.raises(InvalidConfigError, match="out of range"):
        space.get(space.size)
    with pytest.raises(InvalidConfigError, match="choices"):
        space.from_choices([0])
    with pytest.raises(InvalidConfigError, match="malformed"):
        space.from_json("{not json")
    with pytest.raises(InvalidConfigError, match="not an option"):
        bad = dict(space.get(0).values, tile_i=(3, 3, 3))
        space.from_values(bad)
    with pytest.raises(InvalidConfigError, match="space"):
        space.from_json(json.dumps({"space": "conv2d/cpu", "knobs": {}}))


def test_default_config_is_in_space():
    for name, w in WORKLOADS.items():
        c = default_config(w, "cpu")
        assert c.space_name == f"{w.op}/cpu", name


def test_choices_and_indices_are_exact_integers():
    space = space_for(get_workload("matmul-1024"), "cpu")
    n = len(space.knobs)
    good = space.get(5).choices
    for ok in (list(good), tuple(good), np.array(good), np.array(good, np.uint8),
               [np.int32(c) for c in good]):
        assert space.from_choices(ok).index == 5
    bad_choices = [
        [float(c) for c in good], [True] + list(good[1:]), [str(c) for c in good], list(good)[:-1],
        list(good) + [0], [list(good)], np.array(good, float), np.array(good, bool),
        np.array(good).reshape(n, 1), np.array(good, object), None, 3, "0" * n, {}]
    for bad in bad_choices:
        with pytest.raises(InvalidConfigError):
            space.from_choices(bad)
    with pytest.raises(InvalidConfigError, match="out of range"):
        space.from_choices([-1] + list(good[1:]))
    for bad in (2.0, True, "5", None, np.float64(5)):
        with pytest.raises(InvalidConfigError, match="integer"):
            space.get(bad)
    assert space.get(np.int64(5)) == space.get(5)


def test_a_space_and_its_configs_know_workload_and_template():
    a, b = conv2d(1, 4, 9, 9, 8, 3, 1, 1), conv2d(1, 4, 9, 9, 8, 3, 2, 1)
    sa, sb = space_for(a, "llvm"), space_for(b, "cpu")
    assert sa.name == sb.name == "conv2d/cpu"  # the family, stored in records
    assert sa.key == SpaceKey(a.key, "cpu") and str(sa.key) == f"{a.key}/cpu"
    assert (sa.template, sa.workload_key) == ("cpu", a.key) and sb.key != sa.key
    assert space_for(a, "cuda").key == space_for(a, "opencl").key == SpaceKey(a.key, "gpu")
    pow2 = space_for(a, "cpu", split_policy="pow2")
    assert str(pow2.key) == f"{a.key}/cpu[split_policy=pow2]" and pow2.key != sa.key
    assert space_for(a, "cpu", split_policy="all").key == sa.key
    assert space_of(a, pow2.key) == pow2 and space_of(a, sa.key) == sa
    with pytest.raises(InvalidConfigError, match="not a space of"):
        space_of(b, sa.key)
    c = sa.get(7)
    assert c.space_key == sa.key and c.template == "cpu"
    assert pickle.loads(pickle.dumps(c)) == c and pickle.loads(pickle.dumps(c)).space_key == sa.key
    assert json.loads(c.to_json()) == {"space": "conv2d/cpu", "knobs": json.loads(
        json.dumps(c.values))}  # the stored form is unchanged: no key in it
    assert sa.from_json(c.to_json()) == c
    assert sb.from_choices([0] * len(sb.knobs)) != sa.from_choices([0] * len(sa.knobs))
    sa.validate(c)
    with pytest.raises(InvalidConfigError, match=f"config of space {b.key}/cpu, not of"):
        sa.validate(sb.get(0))


def test_lowering_dispatches_on_the_config_s_space():
    a, b = conv2d(1, 4, 9, 9, 8, 3, 1, 1), conv2d(1, 4, 9, 9, 8, 3, 2, 1)
    assert lower(a, space_for(a, "cuda").get(0)).launch  # the GPU template's lowering
    assert not lower(a, space_for(a, "cpu").get(0)).launch
    with pytest.raises(InvalidConfigError, match=f"not a config of {a.key}"):
        lower(a, space_for(b, "cpu").get(0))
    hand_made = ConfigSpace("conv2d/cpu", space_for(a, "cpu").knobs)
    with pytest.raises(InvalidConfigError, match="no template's space"):
        lower(a, hand_made.get(0))


def test_a_config_recorded_before_a_knob_was_added_means_its_first_option():
    from tensorgym.templates import space_for
    from tensorgym.workloads import get_workload

    space = space_for(get_workload("conv2d-C6"), "cpu")
    added = [k for k in space.knobs if k.added]
    assert {k.name for k in added} == {"vector_axis", "pack_weight", "contiguous_writeback",
                                       "pad_vector"}
    config = space.sample(np.random.default_rng(0), 1)[0]
    old = {k: v for k, v in config.values.items() if k not in {a.name for a in added}}
    again = space.from_values(old)
    assert all(again.values[k.name] == k.options[0] for k in added)
    assert {k: again.values[k] for k in old} == old
    with pytest.raises(InvalidConfigError):  # only added knobs may be missing
        space.from_values({k: v for k, v in old.items() if k != "reorder"})


def test_a_config_is_looked_up_under_the_spellings_of_trees_before_its_added_knobs():
    """``spellings``: today's JSON, then the JSON without the added knobs (in their order, from
    the last) while they hold their first option; every spelling means the same config."""
    import json

    from tensorgym.templates import default_config, space_for
    from tensorgym.workloads import get_workload

    w = get_workload("conv2d-C6")
    space = space_for(w, "cpu")
    ref = default_config(w, "cpu")
    texts = space.spellings(ref)
    added = [k.name for k in space.knobs if k.added]
    assert texts[0] == ref.to_json() and len(texts) == len(added) + 1
    for i, text in enumerate(texts):
        knobs = json.loads(text)["knobs"]
        assert set(added) & set(knobs) == set(added[:len(added) - i])
        assert space.from_json(text).index == ref.index
    rows = space.from_values(dict(ref.values, pad_vector=1))
    assert space.spellings(rows) == [rows.to_json()]  # its last added knob is not the default
