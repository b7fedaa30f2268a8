"""calculator/core/hash_once.py: a frozen model's hash is computed once per instance, and is the hash of its fields."""
import copy
import operator
import pickle

from calculator.core import hash_once
from calculator.model.spec import ModelSpec
from calculator.model.presets import load_model
from calculator.core.workload import Overheads, Parallelism, Precision, Workload


def _pydantic_hash(obj) -> int:
    """What pydantic's own frozen-model hash gives: the hash of the tuple of the field values."""
    return hash(operator.itemgetter(*type(obj).model_fields)(obj.__dict__))


def test_the_hash_is_pydantics_hash_of_the_fields():
    w = Workload(seq_len=2048, parallel={"tp": 2, "dp": 4, "zero": 1}, gpu="h100-sxm")
    m = load_model("llama-3.1-8b").spec
    for obj in (w, w.parallel, w.precision, w.overheads, m):
        assert hash(obj) == _pydantic_hash(obj)
        assert hash(obj) == hash(obj)  # the second call answers from the memo


def test_equal_instances_hash_equal_and_differing_ones_are_distinct_keys():
    a, b = Workload(seq_len=4096), Workload(seq_len=4096)
    assert a is not b and a == b and hash(a) == hash(b)
    cache = {a: "a"}
    assert cache[b] == "a"
    assert Workload(seq_len=8192) not in cache
    assert Workload(seq_len=4096, parallel={"dp": 2}) not in cache  # a nested field that differs
    assert Workload(seq_len=4096, precision=Precision(params="fp32", master_weights=None)) not in cache


def test_a_copy_with_an_update_is_hashed_afresh():
    """model_copy copies the instance's __dict__; nothing of the memo may travel with it."""
    w = Workload(seq_len=4096)
    h = hash(w)
    longer = w.model_copy(update={"seq_len": 8192})
    assert hash(longer) == _pydantic_hash(longer) != h
    m = load_model("llama-3.1-8b").spec
    hash(m)
    wider = m.model_copy(update={"intermediate_size": m.intermediate_size + 2})
    assert hash(wider) == _pydantic_hash(wider) != hash(m)
    deep = Workload(parallel={"tp": 2}).model_copy(update={"seq_len": 1024}, deep=True)
    assert hash(deep) == _pydantic_hash(deep)
    assert hash(copy.copy(w)) == h and hash(copy.deepcopy(w)) == h


def test_a_pickled_instance_hashes_as_its_fields():
    p = Parallelism(tp=4, dp=2)
    hash(p)
    back = pickle.loads(pickle.dumps(p))
    assert back == p and hash(back) == _pydantic_hash(back) == hash(p)
    assert back.model_dump() == p.model_dump()


def test_nothing_is_kept_on_the_instance():
    o = Overheads(nccl_bytes_per_group=7)
    hash(o)
    assert set(o.__dict__) == set(Overheads.model_fields) and o.__pydantic_private__ is None
    for other in (copy.copy(o), copy.deepcopy(o), pickle.loads(pickle.dumps(o)), o.model_copy()):
        assert other == o and hash(other) == hash(o) == _pydantic_hash(other)


def test_the_memo_is_bounded(monkeypatch):
    monkeypatch.setattr(hash_once, "_MAX_HASHES", 8)
    hash_once._HASHES.clear()
    kept = [Overheads(nccl_bytes_per_group=n) for n in range(1, 30)]
    for o in kept:
        assert hash(o) == _pydantic_hash(o)
        assert len(hash_once._HASHES) <= 8
    assert all(hash(o) == _pydantic_hash(o) for o in kept)  # hashed again once the memo started over


def test_every_frozen_input_model_hashes_once():
    for cls in (ModelSpec, Workload, Precision, Parallelism, Overheads):
        assert issubclass(cls, hash_once.HashedOnce) and cls.__hash__ is hash_once.HashedOnce.__hash__
        assert cls.model_config["frozen"]


def test_a_copy_with_other_layers_counts_its_own_moe_layers():
    """Nothing computed from a model is kept on the instance, where model_copy would carry it to the copy."""
    m = load_model("deepseek-v3").spec
    assert m.moe_layer_count == 58
    fewer = m.model_copy(update={"num_hidden_layers": 10})
    assert fewer.moe_layer_count == 7 and set(fewer.__dict__) == set(m.__dict__) == set(type(m).model_fields)
