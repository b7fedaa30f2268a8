"""calculator/memory/pipeline_split.py: Megatron-Core's split of the decoder layers over pipeline ranks and their
virtual stages, its refusals, and the in-flight micro-batches of uneven chunks (calculator/memory/parallel.py)."""
import pytest

from calculator import InputError, Workload
from calculator.core.workload import Parallelism
from calculator.memory.parallel import check_divisibility, in_flight_microbatches, stage_layer_counts
from calculator.memory.pipeline_split import check_split, chunk_layer_counts, parse_layout
from calculator.model.presets import load_model

LLAMA_8B = load_model("llama-3.1-8b").spec  # 32 layers


def _par(**kw) -> Parallelism:
    if kw.get("virtual_stages", 1) > 1:
        kw.setdefault("schedule", "interleaved")
    return Parallelism(**kw)


def _field(layers: int, p: Parallelism, mtp: int | None = None) -> str | None:
    try:
        check_split(layers, p, mtp)
    except InputError as err:
        return err.field
    return None


def test_embedding_and_loss_counted_as_layers():
    # 94 + 2 = 96 = 4 ranks × 12 chunks × 2: rank 0's first chunk and rank 3's last chunk hold 1 layer
    p = _par(pp=4, virtual_stages=12, pp_embedding_in_split=True, pp_loss_in_split=True)
    assert _field(94, p) is None
    c = chunk_layer_counts(94, p)
    assert c[0] == (1,) + (2,) * 11 and c[1] == c[2] == (2,) * 12 and c[3] == (2,) * 11 + (1,)
    assert stage_layer_counts(94, p) == (23, 24, 24, 23)
    # only the embedding: 7 + 1 = 8 over 4 ranks (VP1): 1, 2, 2, 2
    p = _par(pp=4, pp_embedding_in_split=True)
    assert chunk_layer_counts(7, p) == ((1,), (2,), (2,), (2,))
    # 94 + 2 = 96 does not split into 5 ranks; 94 + 1 = 95 not into 4 × 12
    assert _field(94, _par(pp=5, pp_embedding_in_split=True, pp_loss_in_split=True)) == "pp_embedding_in_split"
    assert _field(94, _par(pp=4, virtual_stages=12, pp_loss_in_split=True)) == "pp_loss_in_split"


def test_uneven_first_and_last_stages_with_virtual_stages():
    # Megatron: 4 + 8 + 8 + 4 over 4 ranks, VP2: first / last 2 per chunk, the middle ranks 4 per chunk
    p = _par(pp=4, virtual_stages=2, pp_first_stage_layers=4, pp_last_stage_layers=4)
    assert _field(24, p) is None
    assert chunk_layer_counts(24, p) == ((2, 2), (4, 4), (4, 4), (2, 2))
    # 3 layers on the first rank do not split over 2 chunks; 9 per middle rank neither
    assert _field(24, _par(pp=4, virtual_stages=2, pp_first_stage_layers=3, pp_last_stage_layers=3)) \
        == "pp_first_stage_layers"
    assert _field(24, _par(pp=3, virtual_stages=2, pp_first_stage_layers=6, pp_last_stage_layers=9)) \
        == "pp_last_stage_layers"
    # VP1 keeps the old rule
    assert chunk_layer_counts(61, _par(pp=4, pp_first_stage_layers=16, pp_last_stage_layers=15)) \
        == ((16,), (15,), (15,), (15,))


def test_layout_string():
    stages = parse_layout("Et|(tt|)*2tL", 2)
    assert stages == ("Et", "tt", "tt", "tL")
    p = _par(pp=2, virtual_stages=2, pp_layout="Et|(tt|)*2tL")  # stage a·pp + b = virtual stage a of rank b
    assert _field(6, p) is None
    assert chunk_layer_counts(6, p) == ((1, 2), (2, 1))
    # DeepSeek-V3's 61 layers over PP2 VP8 (Megatron-Bridge, pp_layout="Et*4|(t*4|)*14tmL", here with its MTP)
    ds = _par(pp=2, virtual_stages=8, pp_layout="Et*4|(t*4|)*14tmL")
    assert _field(61, ds, mtp=1) is None
    assert chunk_layer_counts(61, ds) == ((4,) * 8, (4,) * 7 + (1,))
    assert _field(61, ds, mtp=0) == "pp_layout"  # the layout trains an MTP layer the workload does not
    assert _field(60, ds, mtp=1) == "pp_layout"  # decoder layers must match
    assert _field(61, _par(pp=2, virtual_stages=4, pp_layout="Et*4|(t*4|)*14tmL"), 1) == "pp_layout"  # VP 8 ≠ 4
    assert _field(6, _par(pp=2, virtual_stages=2, pp_layout="tt|(tt|)*2EL")) == "pp_layout"  # E first, L last
    assert _field(6, _par(pp=2, pp_layout="Etttx|tttL")) == "pp_layout"
    assert _field(6, _par(pp=2, pp_layout="Ettt|tttL", pp_loss_in_split=True)) == "pp_layout"
    assert _field(9, _par(pp=2, pp_layout="(t*9)*99999999")) == "pp_layout"  # refused before unrolling


def test_refusals_name_their_field_through_check_divisibility():
    w = Workload(parallel={"pp": 4, "virtual_stages": 4, "schedule": "interleaved", "pp_embedding_in_split": True,
                           "pp_loss_in_split": True, "num_microbatches": 8})
    with pytest.raises(InputError) as err:  # 32 + 2 = 34 is not 16 chunks
        check_divisibility(LLAMA_8B, w)
    assert err.value.field == "pp_embedding_in_split"
    both = {"pp": 4, "pp_first_stage_layers": 8, "pp_embedding_in_split": True}
    with pytest.raises(InputError) as err:
        check_divisibility(LLAMA_8B, Workload(parallel=both))
    assert err.value.field == "pp_embedding_in_split"


def test_in_flight_chunks_count_by_their_layers():
    # even chunks: the old count, (p − r − 1)·2 + (v − 1)·p + 1 chunks / v
    even = _par(pp=2, virtual_stages=2, num_microbatches=8)
    assert in_flight_microbatches(even, 0, 8) == in_flight_microbatches(even, 0) == 5 / 2
    # rank 0 of "Et|(tt|)*2tL" holds chunks of 1 and 2 layers; forward k runs chunk (k mod 4) // 2: the warm-up's
    # 5 forwards are chunks 0, 0, 1, 1, 0 → 1 + 1 + 2 + 2 + 1 = 7 layers of the rank's 3
    p = _par(pp=2, virtual_stages=2, num_microbatches=8, pp_layout="Et|(tt|)*2tL")
    assert in_flight_microbatches(p, 0, 6) == pytest.approx(7 / 3)
    # rank 1 (chunks of 2 and 1 layers): 3 forwards, chunks 0, 0, 1 → 2 + 2 + 1 = 5 of 3
    assert in_flight_microbatches(p, 1, 6) == pytest.approx(5 / 3)
