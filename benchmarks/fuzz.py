"""Seeded fuzz of every boundary the calculator has (issue 12): engine inputs, mutated config.json files, CLI
argument sets and dashboard URL parameter sets. Not a test: prints, per boundary, how many inputs ran, how many
were computed and how many refused, and the three counts that must be zero:

  tracebacks   an exception other than the boundary's own refusal (InputError / ConfigError / pydantic's
               ValidationError / the CLI's exit 2 / the page's InputProblems) escaped
  hangs        one input took --hang seconds or more (30 by default; the call is interrupted by a timer)
  unbounded    a figure came out NaN, infinite, negative or above the physical bound (10^18 B per GPU)

and two more: monotonicity (doubling the micro-batch or sequence lowered a computed peak) and URL round trips
(values -> URL -> values changed something).

    .venv/bin/python benchmarks/fuzz.py                     # seed 0: 10,000 / 2,000 / 2,000 / 1,000, 20 AppTest runs
    .venv/bin/python benchmarks/fuzz.py --seed 7 --engine 500 --configs 200 --cli 200 --urls 100 --apptest 0

Hub ids are never fetched: HF_ENDPOINT points at a closed loopback port and the Hub cache at a fresh folder.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import random
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
os.environ["HF_ENDPOINT"] = "http://127.0.0.1:9"
os.environ["LLM_MEM_CACHE_DIR"] = tempfile.mkdtemp(prefix="fuzz-hub-cache-")

from pydantic import ValidationError  # noqa: E402

from calculator.core import bounds as B  # noqa: E402
from calculator.core.errors import InputError  # noqa: E402
from calculator.model.hf_config import ConfigError  # noqa: E402
from fuzz_inputs import (base_configs, gen_argv, gen_custom_spec, gen_query, gen_workload,  # noqa: E402
                         mutate_config)

REFUSALS = (InputError, ConfigError, ValidationError)
NAN = float("nan")
NEGATIVE_OK = ("headroom_bytes", "kv_available_bytes")  # a shortfall is a negative headroom


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang()


def bad_figures(obj, path: str = "") -> list[str]:
    """Paths of numbers that are NaN/inf, or byte figures below zero or above the physical bound."""
    bad = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            bad += bad_figures(v, f"{path}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            bad += bad_figures(v, f"{path}[{i}]")
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        if isinstance(obj, float) and not math.isfinite(obj):
            bad.append(f"{path}={obj}")
        elif "bytes" in path.rsplit(".", 1)[-1] or ".components." in path or ".parts." in path:
            low = -B.MAX_RESULT_BYTES if path.endswith(NEGATIVE_OK) else 0
            if not low <= obj <= B.MAX_RESULT_BYTES:
                bad.append(f"{path}={obj:.3g}")
    return bad


class Tally:
    def __init__(self, name: str, hang_s: float):
        self.name, self.hang_s = name, hang_s
        self.counts = Counter()
        self.examples: dict[str, list[str]] = {}
        self.slowest = 0.0
        self.slowest_label = ""

    def note(self, kind: str, what: str) -> None:
        self.counts[kind] += 1
        self.examples.setdefault(kind, [])
        if len(self.examples[kind]) < 3:
            self.examples[kind].append(what[:400])

    def run(self, label: str, fn):
        """Run fn() under the hang timer; it returns ("ok", figures-or-None) or ("refused", None)."""
        self.counts["inputs"] += 1
        start = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, self.hang_s)
        try:
            outcome, figures = fn()
        except Hang:
            self.note("hangs", label)
            return None
        except REFUSALS:
            outcome, figures = "refused", None
        except Exception as exc:  # noqa: BLE001 - counting what escapes is the point
            tb = traceback.format_exception(exc)
            self.note("tracebacks", f"{label}\n{''.join(tb[-3:])}")
            return None
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            seconds = time.perf_counter() - start
            if seconds > self.slowest:
                self.slowest, self.slowest_label = seconds, label
        if seconds >= self.hang_s:  # ended (e.g. refused by its own deadline), but only at the limit
            self.note("hangs", f"{label} ({seconds:.1f} s)")
            return None
        self.counts[outcome] += 1
        bad = bad_figures(figures) if figures is not None else []
        if bad:
            self.note("unbounded", f"{label}: {bad[:3]}")
        return figures

    def line(self) -> str:
        c = self.counts
        extra = "".join(f"  {k} {c[k]}" for k in ("not monotonic", "round trip") if k in c)
        return (f"{self.name:<8} {c['inputs']:>6} inputs  {c['ok']:>6} computed  {c['refused']:>6} refused  "
                f"tracebacks {c['tracebacks']}  hangs {c['hangs']}  unbounded {c['unbounded']}{extra}  "
                f"(slowest {self.slowest:.2f} s)")


# ---- the four boundaries ---------------------------------------------------------------------------------------
def fuzz_engine(rng: random.Random, n: int, tally: Tally) -> None:
    from calculator import Workload, estimate
    from calculator.model.spec import ModelSpec
    from calculator.model.presets import list_models, load_model
    specs = [load_model(m.id).spec for m in list_models()]

    def one(model_kw, w):
        model = ModelSpec(**model_kw) if model_kw is not None else rng_spec
        e = estimate(model, Workload(**w))
        return "ok", e.to_dict()

    for i in range(n):
        rng_spec = rng.choice(specs)
        model_kw = gen_custom_spec(rng) if rng.random() < 0.15 else None
        w = gen_workload(rng)
        d = tally.run(f"engine #{i}: {model_kw or rng_spec.name} {w}", lambda: one(model_kw, w))
        if d is not None and i % 5 == 0:  # monotonicity: twice the micro-batch or sequence never lowers the peak
            field = rng.choice(["micro_batch", "seq_len"])
            w2 = dict(w, **{field: 2 * w.get(field, 1 if field == "micro_batch" else 4096)})
            try:
                d2 = one(model_kw, w2)[1]
            except REFUSALS:
                continue
            except Exception as exc:  # noqa: BLE001
                tally.note("tracebacks", f"engine #{i} doubled {field}: {exc!r}")
                continue
            if d2["peak_allocated_bytes"] < d["peak_allocated_bytes"]:
                tally.note("not monotonic", f"engine #{i} {field}x2: {d['peak_allocated_bytes']} -> "
                                            f"{d2['peak_allocated_bytes']} {model_kw or rng_spec.name} {w}")


def fuzz_configs(rng: random.Random, n: int, tally: Tally, texts_out: list[str]) -> None:
    from calculator import Workload, estimate
    from calculator.model.hf_config import parse_config_json, spec_from_hf_config
    configs = base_configs()

    def one(text):
        spec = spec_from_hf_config(parse_config_json(text)).spec
        e = estimate(spec, Workload(mode=rng.choice(["train", "infer"]), seq_len=1024, gen_tokens=16))
        return "ok", e.to_dict()

    for i in range(n):
        text = mutate_config(rng, rng.choice(configs))
        texts_out.append(text)
        tally.run(f"config #{i}: {text[:300]}", lambda: one(text))


def fuzz_cli(rng: random.Random, n: int, tally: Tally, config_texts: list[str]) -> None:
    from calculator.cli.main import main
    folder = Path(tempfile.mkdtemp(prefix="fuzz-configs-"))
    paths = []
    for i, text in enumerate(config_texts[:200]):
        (folder / f"c{i}.json").write_text(text)
        paths.append(str(folder / f"c{i}.json"))

    def one(argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
        if code == 2 and err.getvalue().startswith("error: ") and not out.getvalue():
            return "refused", None
        if code != 0:
            raise RuntimeError(f"exit {code}: {err.getvalue()[:200]!r}")
        text = out.getvalue()
        if "--json" in argv:
            return "ok", json.loads(text, parse_constant=lambda c: float(c.lower().replace("infinity", "inf")))
        words = set(text.lower().replace("(", " ").replace(")", " ").split())
        if words & {"nan", "inf", "-inf"}:
            return "ok", {"text": NAN}
        return "ok", None

    for i in range(n):
        argv = gen_argv(rng, paths)
        tally.run(f"cli #{i}: {argv}", lambda: one(argv))


def fuzz_urls(rng: random.Random, n: int, tally: Tally, texts: list[str]) -> list[dict]:
    from dashboard.inputs import state
    queries = []

    def one(query):
        link = state.check_query_params(query)
        values = {**state.DEFAULTS, **link.values}
        back = state.check_query_params(state.to_query(values))
        if {**state.DEFAULTS, **back.values} != values:
            tally.note("round trip", f"{query} -> {state.to_query(values)}")
        try:
            result = state.compute(values)
        except state.InputProblems:
            return "refused", None
        if result.estimate.mode != "infer":  # what the page's answer box computes beside the estimate: the
            from dashboard.advice import advice_for  # remedies (dashboard/views/answer.py, advice.py)
            advice_for(result, values)
        return "ok", result.estimate.to_dict()

    for i in range(n):
        query = gen_query(rng, texts)
        queries.append(query)
        tally.run(f"url #{i}: {query}", lambda: one(query))
    return queries


def fuzz_apptest(queries: list[dict], tally: Tally) -> None:
    from streamlit import logger
    from streamlit.testing.v1 import AppTest
    logger.set_log_level("error")  # "missing ScriptRunContext" from the page's caches outside a page run

    def one(query):
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=tally.hang_s)
        for k, v in query.items():
            at.query_params[k] = v
        at.run()
        if at.exception:
            raise RuntimeError(f"page exception: {at.exception[0].message[:300]}")
        return ("refused" if at.error else "ok"), None

    for i, query in enumerate(queries):
        tally.run(f"apptest #{i}: {query}", lambda: one(query))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--engine", type=int, default=10_000)
    ap.add_argument("--configs", type=int, default=2_000)
    ap.add_argument("--cli", type=int, default=2_000)
    ap.add_argument("--urls", type=int, default=1_000)
    ap.add_argument("--apptest", type=int, default=20, help="URL sets also opened in the page through AppTest")
    ap.add_argument("--hang", type=float, default=30.0,
                    help="seconds one input may take (the CLI's plan search stops itself at 20 s)")
    ap.add_argument("--examples", action="store_true", help="print up to 3 inputs per failure kind")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGALRM, _alarm)
    rng = random.Random(args.seed)
    start = time.perf_counter()
    tallies = [Tally(name, args.hang) for name in ("engine", "configs", "cli", "urls", "apptest")]
    texts: list[str] = []
    runs = [(fuzz_engine, (args.engine,)), (fuzz_configs, (args.configs, texts)), (fuzz_cli, (args.cli, texts)),
            (fuzz_urls, (args.urls, texts))]
    queries: list[dict] = []
    for tally, (fn, extra) in zip(tallies, runs):
        t0 = time.perf_counter()
        out = fn(rng, extra[0], tally, *extra[1:])
        queries = out if isinstance(out, list) else queries
        print(f"{tally.line()}  {time.perf_counter() - t0:.0f} s", flush=True)
        if args.examples and tally.slowest_label:
            print(f"--- {tally.name} slowest ({tally.slowest:.2f} s): {tally.slowest_label[:400]}")
    if args.apptest:
        t0 = time.perf_counter()
        fuzz_apptest(rng.sample(queries, min(args.apptest, len(queries))), tallies[-1])
        print(f"{tallies[-1].line()}  {time.perf_counter() - t0:.0f} s", flush=True)
    totals = Counter()
    for t in tallies:
        totals.update(t.counts)
        if args.examples:
            for kind, shown in t.examples.items():
                for s in shown:
                    print(f"--- {t.name} {kind}: {s}")
    print(f"seed {args.seed}: {totals['inputs']:,} inputs in {time.perf_counter() - start:.0f} s; "
          f"tracebacks/hangs/unbounded: {totals['tracebacks']}/{totals['hangs']}/{totals['unbounded']}; "
          f"not monotonic {totals['not monotonic']}; URL round trips changed {totals['round trip']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
