"""Real-code oracle for the compile rule family: Dynamo's own breaks and recompiles vs. xlalint's findings.

    python benchmarks/compile_oracle/run.py --collect            # run the corpora under Dynamo (CPU, ~10 min)
    python benchmarks/compile_oracle/run.py --score              # lint the same trees, print the tables
    python benchmarks/compile_oracle/run.py --collect --score --only nanogpt

See README.md beside this file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from collect import collect_corpus, file_hashes, summarize  # noqa: E402
from corpora import corpora, lay_out  # noqa: E402


def file_sha1(root: str, rel: str) -> str | None:
    return file_hashes(root, [rel]).get(rel)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--collect", action="store_true", help="run the corpora under torch.compile(backend='eager')")
    ap.add_argument("--score", action="store_true", help="run xlalint on the corpora and score it")
    ap.add_argument("--only", default="", help="comma-separated corpus or case names")
    ap.add_argument("--work", default="/tmp/compile_oracle/work", help="scratch folder for the corpus trees")
    ap.add_argument("--results", default=os.path.join(HERE, "results"), help="where the oracle JSON goes")
    ap.add_argument("--python", default=sys.executable, help="interpreter with torch (and torchvision) for --collect")
    ap.add_argument("--xlalint", default="xlalint", help="the xlalint command (default: the one on PATH)")
    ap.add_argument("--select", default="DYN", help="rule codes/prefixes scored (default: DYN)")
    ap.add_argument("--json", dest="json_out", help="also write the score as JSON here")
    ap.add_argument("--assume-compiled", action="store_true",
                    help="score the library files alone (no driver) linted with --assume-compiled")
    ap.add_argument("--with-entries", action="store_true",
                    help="with --assume-compiled: name the functions the driver compiles besides forwards "
                    "in the tree's `compiled` setting")
    ns = ap.parse_args(argv)
    if not (ns.collect or ns.score):
        ap.error("give --collect, --score or both")
    only = {s for s in ns.only.split(",") if s}
    chosen = [c for c in corpora() if not only or c.name in only or any(k.name in only for k in c.cases)]

    os.environ.setdefault("ORACLE_PYTHON", ns.python)
    if ns.collect:
        start, records = time.perf_counter(), []
        for corpus in chosen:
            rec = collect_corpus(corpus, ns.work, ns.results, ns.python, only, log=print)
            if rec:
                records.append(rec)
        print(f"\ncollected in {time.perf_counter() - start:.0f} s -> {ns.results}\n")
        print(summarize(records))

    if ns.score:
        from score import score_all

        records = []
        for corpus in chosen:
            path = os.path.join(ns.results, f"{corpus.name}.json")
            if not os.path.exists(path):
                print(f"{corpus.name}: no oracle at {path} (run --collect first)")
                continue
            with open(path) as fh:
                rec = json.load(fh)
            root = os.path.join(ns.work, corpus.name)
            if not os.path.isdir(root):
                root, _ = lay_out(corpus, ns.work)
            stale = [f for f, h in rec.get("file_sha1", {}).items() if file_sha1(root, f) != h]
            if stale:
                print(f"{corpus.name}: {len(stale)} files differ from the collected run "
                      f"(e.g. {stale[0]}): re-run --collect")
            records.append((rec, root))
        entries = {c.name: c.entries for c in chosen} if ns.with_entries else None
        report = score_all(records, ns.xlalint, ns.select, library=ns.assume_compiled, entries=entries)
        print(report["text"])
        if ns.json_out:
            with open(ns.json_out, "w") as fh:
                json.dump({k: v for k, v in report.items() if k != "text"}, fh, indent=1)
        return 2 if report.get("lint_error") else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
