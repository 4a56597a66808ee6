"""Collector: run every case of every corpus twice (compiled, then traced) and write one JSON per corpus.

Each run is its own process (``capture.py``), at ``nice 10``, one thread, with a time cap: a case that
hangs or crashes costs its own record only.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time

from corpora import Corpus, corpora, lay_out

HERE = os.path.dirname(os.path.abspath(__file__))


def run_capture(root: str, corpus: Corpus, case, mode: str, python: str) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
        out = fh.name
    cmd = ["nice", "-n", "10", python, os.path.join(HERE, "capture.py"), "--mode", mode, "--root", root,
           "--out", out, *sum((["--stub", s] for s in corpus.stubs), []), case.script, *case.args]
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONHASHSEED="0",
               TORCHINDUCTOR_COMPILE_THREADS="1")
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=case.timeout)
        rc, tail = proc.returncode, proc.stderr[-800:]
    except subprocess.TimeoutExpired:
        rc, tail = "timeout", f"killed after {case.timeout}s"
    wall = round(time.perf_counter() - start, 1)
    try:
        with open(out) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        data = {"error": f"no result (rc={rc}): {tail.strip()[-400:]}"}
    finally:
        if os.path.exists(out):
            os.unlink(out)
    data["wall_seconds"] = wall
    return data


def file_hashes(root: str, rels) -> dict:
    out = {}
    for rel in sorted(rels):
        path = os.path.join(root, rel)
        if os.path.isfile(path):
            with open(path, "rb") as fh:
                out[rel] = hashlib.sha1(fh.read()).hexdigest()[:12]
    return out


def collect_corpus(corpus: Corpus, work: str, results: str, python: str, only=None, log=print) -> dict | None:
    try:
        root, provenance = lay_out(corpus, work)
    except (FileNotFoundError, OSError, subprocess.CalledProcessError) as e:
        log(f"{corpus.name}: skipped: {e}")
        return None
    record = {"corpus": corpus.name, "source": provenance, "python": sys.version.split()[0], "cases": {}}
    try:
        import torch

        record["torch"] = torch.__version__
    except ImportError:
        pass
    seen_files = set()
    for case in corpus.cases:
        if only and case.name not in only and corpus.name not in only:
            continue
        compiled = run_capture(root, corpus, case, "compile", python)
        traced = run_capture(root, corpus, case, "trace", python)
        record["cases"][case.name] = {"script": case.script, "args": case.args, "compile": compiled,
                                      "trace": traced}
        for b in compiled.get("breaks", []):
            if b.get("site"):
                seen_files.add(b["site"][0])
        seen_files.update(traced.get("executed_lines", {}))
        n_b = len({tuple(b["site"]) for b in compiled.get("breaks", []) if b.get("site")})
        n_r = len(compiled.get("recompiles", []))
        err = compiled.get("error") or traced.get("error")
        log(f"{corpus.name}/{case.name}: {n_b} break sites, {n_r} recompiles, "
            f"{compiled['wall_seconds']}+{traced['wall_seconds']}s" + (f"  ERROR {err[:160]}" if err else ""))
    record["file_sha1"] = file_hashes(root, seen_files)
    os.makedirs(results, exist_ok=True)
    path = os.path.join(results, f"{corpus.name}.json")
    subset = only and corpus.name not in only
    if subset and os.path.exists(path):  # some cases re-run: keep the others of the same source
        with open(path) as fh:
            old = json.load(fh)
        if old.get("source") == record["source"]:
            record["cases"] = {**old["cases"], **record["cases"]}
            record["file_sha1"] = {**old.get("file_sha1", {}), **record["file_sha1"]}
    with open(path, "w") as fh:
        json.dump(record, fh, indent=1)
    return record


def summarize(records: list[dict]) -> str:
    """Markdown: per corpus, cases run, graphs, break sites, recompiles, top GB ids."""
    rows = ["| corpus | cases ok/run | graphs | break records | break sites in project | recompiles "
            "(non-benign) | limit hits | top GB ids |", "|---|---|---|---|---|---|---|---|"]
    for rec in records:
        gbs, sites, nrec, nben, graphs, hits, ok = collections.Counter(), set(), 0, 0, 0, 0, 0
        nbreak = 0
        for name, case in rec["cases"].items():
            c = case["compile"]
            ok += not c.get("error")
            graphs += c.get("counters", {}).get("stats", {}).get("unique_graphs", 0)
            for b in c.get("breaks", []):
                nbreak += 1
                gbs[b.get("gb") or "?"] += 1
                if b.get("site"):
                    sites.add((b["site"][0], b["site"][1], b.get("gb")))
            for r in c.get("recompiles", []):
                nrec += 1
                nben += not r["benign"]
            hits += len(c.get("limit_hits", []))
        top = ", ".join(f"{g}×{n}" for g, n in gbs.most_common(4))
        rows.append(f"| {rec['corpus']} | {ok}/{len(rec['cases'])} | {graphs} | {nbreak} | {len(sites)} | "
                    f"{nrec} ({nben}) | {hits} | {top} |")
    return "\n".join(rows)
