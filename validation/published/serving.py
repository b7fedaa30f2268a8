"""Published serving-engine start-up figures against calculator/engines.

    python -m validation.published.serving          # the error table (GiB, and the KV pool's error in %)

`validation/serving_published.csv`: one row per engine start-up whose log figures are public, each with its
source (repository path at a commit, or issue URL) and the engine flags it ran with. `compared` says how a row is
used: `yes` (every figure compared), `calibration` (the row a constant was taken from: it agrees by construction),
`blocks-only` (a model the engine cannot express exactly: only the block arithmetic, from the published pool),
`informational` (engine release not stated, or extra components such as an LMCache connector: shown, not bound).
The bound the tests hold (tests/validation/test_serving_published.py): the KV pool within 5% where it is at least 10 GiB,
within 0.5 GiB (0.7% of an H100's budget) where it is smaller, and the same start / refuse-to-start verdict.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from calculator import Workload, estimate
from calculator.engines import vllm
from calculator.model.presets import load_model

CSV = Path(__file__).resolve().parents[1] / "serving_published.csv"
GiB = 2**30


@dataclass(frozen=True)
class Row:
    id: str
    compared: str
    published: dict  # figure -> GiB (None where not published)
    ours: dict
    published_starts: bool
    ours_starts: bool
    published_tokens: int | None
    ours_tokens: int
    notes: str

    @property
    def kv_error_gib(self) -> float | None:
        pub = self.published["kv"]
        return None if pub is None else self.ours["kv"] - pub

    @property
    def kv_error_pct(self) -> float | None:
        pub = self.published["kv"]
        return None if not pub or pub <= 0 else 100 * (self.ours["kv"] - pub) / pub


def _f(x: str) -> float | None:
    return float(x) if x.strip() else None


def rows() -> list[dict]:
    with CSV.open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def workload(r: dict) -> Workload:
    mml = int(r["max_model_len"]) if r["max_model_len"] else None
    serving = {"memory_fraction": float(r["memory_fraction"]), "max_model_len": mml,
               "block_size": int(r["block_size"]) if r["block_size"] else None, "version": r["version"] or None}
    return Workload(mode="infer", engine=r["engine"], gpu=r["gpu"], seq_len=mml or 4096,
                    parallel={"tp": int(r["tp"])}, serving=serving, weight_dtype=r["weight_dtype"] or None,
                    expert_weight_dtype=r["expert_weight_dtype"] or None)


def compare(r: dict) -> Row:
    sv = estimate(load_model(r["model"]).spec, workload(r), with_fits=False).serving
    pub = {k: _f(r[f"published_{k}_gib"]) for k in ("weights", "activation", "non_torch", "cuda_graph", "kv")}
    ours = {"weights": sv.weights_bytes / GiB, "activation": sv.activation_peak_bytes / GiB,
            "non_torch": sv.non_torch_bytes / GiB, "cuda_graph": sv.cuda_graph_bytes / GiB,
            "kv": sv.kv_available_bytes / GiB}
    if r["compared"] == "blocks-only":  # the published pool through our block arithmetic
        m = load_model(r["model"]).spec
        token = 2 * m.kv_heads * m.head_size * 2
        groups = vllm.kv_groups(m, range(m.num_hidden_layers), token, int(r["block_size"]))
        blocks = round(pub["kv"] * GiB / groups.bytes_per_block)  # the log rounds the pool to 0.01 GiB
        per_req = groups.blocks_per_request(int(r["max_model_len"]), int(r["block_size"]), 8192)
        ours = {**{k: None for k in ours}, "kv": pub["kv"]}
        tokens = int(blocks / per_req * int(r["max_model_len"]))
    else:
        tokens = sv.kv_pool_tokens
    return Row(r["id"], r["compared"], pub, ours, r["published_starts"] == "yes", sv.starts,
               int(r["published_kv_tokens"]) if r["published_kv_tokens"] else None, tokens, r["notes"])


def table() -> list[Row]:
    return [compare(r) for r in rows()]


def _g(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


def main() -> None:
    print("| row | weights pub / ours | activation pub / ours | KV pool pub / ours (GiB) | KV error | tokens pub / "
          "ours | starts pub / ours |")
    print("|---|---|---|---|---|---|---|")
    for row in table():
        p, o = row.published, row.ours
        err = row.kv_error_pct
        err_s = "—" if row.kv_error_gib is None else (f"{err:+.1f}%" if err is not None else
                                                      f"{row.kv_error_gib:+.2f} GiB")
        print(f"| {row.id} ({row.compared}) | {_g(p['weights'])} / {_g(o['weights'])} | {_g(p['activation'])} / "
              f"{_g(o['activation'])} | {_g(p['kv'])} / {_g(o['kv'])} | {err_s} | "
              f"{row.published_tokens or '—'} / {row.ours_tokens:,} | {row.published_starts} / {row.ours_starts} |")


if __name__ == "__main__":
    main()
