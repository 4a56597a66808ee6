"""Scorer: xlalint's compile findings against what Dynamo reported on the same trees.

* Recall on breaks: an oracle break *site* (the deepest frame of the break's user stack inside the
  project, so a break inside torch counts at the project line that called into it) is found when a
  finding's line range overlaps the statement that holds it. Sites in ``_oracle_driver.py`` (ours) and
  breaks with no project frame are not statically visible and are counted apart.
* Recall on recompiles: a non-benign recompile (train/eval and grad-mode toggles are benign: one compile
  per mode) of project code is found when a finding sits on one of its lines: the compiled function's
  ``def``, the line the failing guard came from, or the project line that called the compiled code.
  Recall is over guards on Python values, types and ids; shape guards (a size changed: with
  ``dynamic=None`` Dynamo recompiles once, dynamically) are counted and listed apart.
* Precision: over findings on executed lines (a plain traced run of the same case): a finding is right
  when it is on a break site, a recompile line, or a compiled caller of a break (the call of a helper
  that breaks splits the caller's graph too; counted for precision, not recall); wrong otherwise, split into "compiled, traced without
  a break" and "ran, but outside any compiled call". Findings on lines that never ran, or in a function
  Dynamo gave up on ("Skipping the function and falling back to eager": none of its lines were traced),
  are listed as unverified, not scored.

Library mode (``--assume-compiled``): the corpus is linted without our ``_oracle_driver.py`` (the
library's files alone, as its maintainer would), with ``xlalint check --assume-compiled``: nothing
there calls ``torch.compile``, the option takes every ``nn.Module.forward`` as compiled. Precision is
then over findings on lines Dynamo traced (a finding on a line that ran eagerly, outside every
compiled call, is code the user may compile too: counted as "ran uncompiled", not scored).
"""

from __future__ import annotations

import ast
import collections
import functools
import json
import os
import re
import shutil
import subprocess

from corpora import DRIVER


@functools.lru_cache(maxsize=None)
def _statements(path: str):
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            src = fh.read()
        tree = ast.parse(src)
    except (OSError, SyntaxError, ValueError):
        return [], [], []
    spans, funcs = [], []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            funcs.append((node.lineno, node.end_lineno or node.lineno))
        if isinstance(node, ast.stmt):
            end = node.end_lineno or node.lineno
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                end = max(node.lineno, body[0].lineno - 1)  # a compound statement: its header only
            spans.append((node.lineno, end))
    return spans, src.splitlines(), funcs


def stmt_span(root: str, rel: str, line: int) -> tuple[int, int]:
    """The innermost statement (header, for compound ones) holding ``line``; the line alone if none."""
    spans, _, _ = _statements(os.path.join(root, rel))
    best = None
    for lo, hi in spans:
        if lo <= line <= hi and (best is None or hi - lo < best[1] - best[0]):
            best = (lo, hi)
    return best or (line, line)


def source_line(root: str, rel: str, line: int) -> str:
    _, lines, _ = _statements(os.path.join(root, rel))
    return lines[line - 1].strip()[:110] if 0 < line <= len(lines) else ""


def func_span(root: str, rel: str, line: int) -> tuple[int, int] | None:
    """The innermost function (def or lambda) holding ``line``."""
    _, _, funcs = _statements(os.path.join(root, rel))
    best = None
    for lo, hi in funcs:
        if lo <= line <= hi and (best is None or hi - lo < best[1] - best[0]):
            best = (lo, hi)
    return best


def frame_skipped(brk: dict) -> bool:
    """Dynamo gave up on the whole frame: it runs eagerly, none of its other lines were traced."""
    if "skip" in brk:
        return brk["skip"]
    return "falling back to eager" in brk.get("type", "") or "Skipping the function" in brk.get("type", "")


SHAPE_GUARD = re.compile(r"size mismatch|stride|dtype mismatch|device mismatch|requires_grad mismatch")


def recompile_kind(reason: str) -> str:
    """"shape": a tensor's size/stride/dtype changed (with dynamic=None Dynamo then compiles a dynamic
    graph once: the hazard only under dynamic=False); "value": a guard on a Python value, type or id."""
    return "shape" if SHAPE_GUARD.search(reason) else "value"


def norm_reason(reason: str) -> str:
    return re.sub(r"\d+(\.\d+)?", "N", reason)


def _add_breaks(o: dict, name: str, case: dict, root: str):
    comp = case.get("compile", {})
    in_compiled = {(f, ln) for f, ls in case.get("trace", {}).get("compiled_lines", {}).items() for ln in ls}
    # a repeated break is logged with its stack suppressed: give it the site of its first report
    first_site = {(b.get("gb"), tuple(b.get("at") or ())): b["site"] for b in comp.get("breaks", [])
                  if b.get("site") and not b.get("duplicate")}
    for b in comp.get("breaks", []):
        site = b.get("site") or first_site.get((b.get("gb"), tuple(b.get("at") or ())))
        if frame_skipped(b):
            frames = [(f, ln) for f, ln, _ in b.get("frames", [])] or ([tuple(site)] if site else [])
            for f, ln in frames:
                if f != DRIVER and ((f, ln) in in_compiled or (f, ln) == tuple(site or ())):
                    span = func_span(root, f, ln)
                    if span:
                        o["skipped"][f].add(span)
        for f, ln, _ in b.get("frames", [])[:-1]:
            if (f, ln) in in_compiled and f != DRIVER:
                o["stack"][f].add(ln)  # a compiled caller of the break: Dynamo splits the graph there too
        if not site or site[0] == DRIVER:
            o["invisible"]["driver" if site else "no project frame"] += 1
            continue
        entry = o["sites"].setdefault(tuple(site), {"gb": collections.Counter(), "cases": set(),
                                                    "type": b.get("gb_type") or b.get("type", "")})
        entry["gb"][b.get("gb") or "?"] += 1
        entry["cases"].add(name)


def _add_recompiles(o: dict, name: str, case: dict):
    for r in case.get("compile", {}).get("recompiles", []):
        if r.get("benign"):
            o["benign"] += 1
            continue
        if not r.get("code") or r["code"][0].startswith("<ext>"):
            o["internal"] += 1  # Dynamo recompiling torch/stdlib code (e.g. abc's __subclasshook__)
            continue
        lines = {tuple(r["code"])} | {tuple(s) for s in r.get("guard_sites", [])}
        if r.get("callers"):
            lines.add(tuple(r["callers"][0]))
        key = (tuple(r["code"]), norm_reason(r.get("reason", "")))
        entry = o["recompiles"].setdefault(key, {"lines": set(), "reason": r.get("reason", ""), "cases": set(),
                                                 "count": 0, "function": r.get("function"),
                                                 "kind": recompile_kind(r.get("reason", ""))})
        entry["lines"] |= {ln for ln in lines if ln[0] != DRIVER}
        entry["cases"].add(name)
        entry["count"] += 1


def oracle_sets(rec: dict, root: str) -> dict:
    """Break sites, grouped recompiles and executed lines of one corpus, over all its cases."""
    dd = lambda: collections.defaultdict(set)  # noqa: E731
    o = {"sites": {}, "invisible": collections.Counter(), "recompiles": {}, "benign": 0, "internal": 0,
         "skipped": dd(),  # file -> spans of functions Dynamo fell back to eager in
         "stack": dd(),  # file -> lines of compiled frames that called into a break
         "executed": dd(), "compiled": dd()}
    for name, case in rec["cases"].items():
        _add_breaks(o, name, case, root)
        _add_recompiles(o, name, case)
        trace = case.get("trace", {})
        for f, ls in trace.get("executed_lines", {}).items():
            o["executed"][f].update(ls)
        for f, ls in trace.get("compiled_lines", {}).items():
            o["compiled"][f].update(ls)
    return o


def library_tree(root: str, entries: list | None = None) -> str:
    """A copy of the corpus at ``root`` without our driver (and the collector's caches): the
    library's own files, where nothing calls ``torch.compile``. ``entries``: the functions a user
    compiles besides forwards, written as ``compiled = [...]`` in the tree's configuration."""
    dest = root.rstrip("/") + "-library"
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(root, dest, symlinks=True, ignore=shutil.ignore_patterns(DRIVER, "__pycache__", ".xlalint_cache"))
    if entries:
        with open(os.path.join(dest, "pyproject.toml"), "a") as fh:
            fh.write("\n[tool.xlalint]\ncompiled = [%s]\n" % ", ".join(json.dumps(e) for e in entries))
    return dest


def run_xlalint(xlalint: str, root: str, select: str, extra: tuple[str, ...] = ()) -> tuple[list, str | None]:
    exe = shutil.which(xlalint) or xlalint
    cmd = [exe, "check", "--preview", "--select", select, *extra, "--output-format", "json", "--exit-zero",
           "--no-cache", "."]
    try:
        proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as e:
        return [], f"{' '.join(cmd)}: {e}"
    if proc.returncode != 0:
        return [], (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
    try:
        findings = json.loads(proc.stdout or "[]")
    except ValueError:
        return [], "xlalint printed no JSON"
    for f in findings:
        f["rel"] = os.path.relpath(os.path.realpath(os.path.join(root, f["filename"])),
                                   os.path.realpath(root)).replace(os.sep, "/")
    return findings, None


def score_corpus(rec: dict, root: str, findings: list, library: bool = False) -> dict:
    o = oracle_sets(rec, root)
    site_spans = {s: stmt_span(root, s[0], s[1]) for s in o["sites"]}
    found_sites, found_rec = set(), set()
    rows = []
    for f in findings:
        rel = f["rel"]
        if rel == DRIVER or rel.startswith(".."):
            continue
        lo, hi = f["location"]["row"], f["end_location"]["row"]
        flo, fhi = stmt_span(root, rel, lo)
        lo, hi = min(lo, flo), max(hi, fhi)
        hit_sites = [s for s, (a, b) in site_spans.items() if s[0] == rel and a <= hi and lo <= b]
        hit_rec = [k for k, e in o["recompiles"].items() if any(ln[0] == rel and lo <= ln[1] <= hi
                                                                  for ln in e["lines"])]
        found_sites.update(hit_sites)
        found_rec.update(hit_rec)
        ran = any(ln in o["executed"].get(rel, ()) for ln in range(lo, hi + 1))
        in_compiled = any(ln in o["compiled"].get(rel, ()) for ln in range(lo, hi + 1))
        eager = any(a <= lo <= b for a, b in o["skipped"].get(rel, ()))
        on_stack = any(lo <= ln <= hi for ln in o["stack"].get(rel, ()))
        verdict = ("tp" if hit_sites or hit_rec else "tp-stack" if on_stack else "unverified" if not ran else
                   "unverified-eager" if eager else "fp-traced" if in_compiled else
                   "unverified-uncompiled" if library else "fp-outside")
        rows.append({"code": f["code"], "file": rel, "line": f["location"]["row"], "verdict": verdict,
                     "message": f.get("message", "")[:120], "source": source_line(root, rel, f["location"]["row"]),
                     "gb": sorted({g for s in hit_sites for g in o["sites"][s]["gb"]})})
    fn_sites = [
        {"file": s[0], "line": s[1], "gb": ",".join(sorted(e["gb"])), "type": e["type"][:90],
         "cases": sorted(e["cases"]), "source": source_line(root, s[0], s[1])}
        for s, e in sorted(o["sites"].items()) if s not in found_sites
    ]
    fn_rec = [
        {"function": e["function"], "reason": e["reason"][:110], "count": e["count"], "cases": sorted(e["cases"]),
         "kind": e["kind"],
         "lines": sorted(f"{a}:{b}" for a, b in e["lines"])}
        for k, e in o["recompiles"].items() if k not in found_rec
    ]
    gb_sites = collections.Counter()
    for e in o["sites"].values():
        for g in e["gb"]:
            gb_sites[g] += 1
    visible_rec = [k for k, e in o["recompiles"].items() if e["lines"] and e["kind"] == "value"]
    shape_rec = [k for k, e in o["recompiles"].items() if e["lines"] and e["kind"] == "shape"]
    return {
        "corpus": rec["corpus"], "source": rec.get("source"), "library": library,
        "break_sites": len(o["sites"]), "break_sites_found": len(found_sites),
        "breaks_not_visible": dict(o["invisible"]),
        "recompiles": len(visible_rec), "recompiles_found": len(found_rec & set(visible_rec)),
        "shape_recompiles": len(shape_rec), "shape_recompiles_found": len(found_rec & set(shape_rec)),
        "recompile_events_benign": o["benign"], "recompile_events_internal": o["internal"],
        "gb_sites": dict(gb_sites.most_common()),
        "findings": rows, "fn_sites": fn_sites, "fn_recompiles": fn_rec,
    }


def _ratio(a: int, b: int) -> str:
    return f"{a / b:.2f}" if b else "n/a"


def render(scores: list[dict], lint_errors: dict) -> str:
    if any(s.get("library") for s in scores):
        out = ["# Library mode: the corpora's files alone (no driver), `xlalint check --assume-compiled`", ""]
    else:
        out = []
    out += ["## Oracle (what Dynamo reported)", "",
           "| corpus | break sites (project) | not visible | recompiles on values (grouped) | recompiles on "
           "shapes (grouped) | benign / torch-internal recompile events | GB ids (sites) |",
           "|---|---|---|---|---|---|---|"]
    for s in scores:
        gbs = ", ".join(f"{g}×{n}" for g, n in list(s["gb_sites"].items())[:6])
        nv = sum(s["breaks_not_visible"].values())
        out.append(f"| {s['corpus']} | {s['break_sites']} | {nv} | {s['recompiles']} | {s['shape_recompiles']} | "
                   f"{s['recompile_events_benign']} / {s['recompile_events_internal']} | {gbs} |")
    out += ["", "## Score per corpus", "",
            "| corpus | break recall | recompile recall | findings | on executed lines | TP | FP | precision | "
            "unverified (not run / frame ran eager) |", "|---|---|---|---|---|---|---|---|---|"]
    tot = collections.Counter()
    for s in scores:
        v = collections.Counter("tp" if r["verdict"] == "tp-stack" else r["verdict"] for r in s["findings"])
        fp = v["fp-traced"] + v["fp-outside"]
        tot.update(bs=s["break_sites"], bf=s["break_sites_found"], rc=s["recompiles"], rf=s["recompiles_found"],
                   n=len(s["findings"]), tp=v["tp"], fp=fp, un=v["unverified"], ue=v["unverified-eager"])
        err = f" (xlalint: {lint_errors[s['corpus']]})" if s["corpus"] in lint_errors else ""
        out.append(f"| {s['corpus']}{err} | {s['break_sites_found']}/{s['break_sites']} = "
                   f"{_ratio(s['break_sites_found'], s['break_sites'])} | {s['recompiles_found']}/{s['recompiles']} = "
                   f"{_ratio(s['recompiles_found'], s['recompiles'])} | {len(s['findings'])} | {v['tp'] + fp} | "
                   f"{v['tp']} | {fp} | {_ratio(v['tp'], v['tp'] + fp)} | {v['unverified']} / {v['unverified-eager']} |")
    out.append(f"| **all** | {tot['bf']}/{tot['bs']} = {_ratio(tot['bf'], tot['bs'])} | {tot['rf']}/{tot['rc']} = "
               f"{_ratio(tot['rf'], tot['rc'])} | {tot['n']} | {tot['tp'] + tot['fp']} | {tot['tp']} | {tot['fp']} | "
               f"{_ratio(tot['tp'], tot['tp'] + tot['fp'])} | {tot['un']} / {tot['ue']} |")
    per_rule = collections.defaultdict(collections.Counter)
    for s in scores:
        for r in s["findings"]:
            per_rule[r["code"]]["tp" if r["verdict"] == "tp-stack" else r["verdict"]] += 1
    out += ["", "## Score per rule", "", "| rule | findings | TP | FP traced | FP outside compiled | precision | "
            "unverified (not run / eager / ran uncompiled) | break sites found |", "|---|---|---|---|---|---|---|---|"]
    sites_by_rule: collections.Counter = collections.Counter()
    for s in scores:
        for r in s["findings"]:
            if r["verdict"] == "tp" and r["gb"]:
                sites_by_rule[r["code"]] += 1
    for code, v in sorted(per_rule.items()):
        fp = v["fp-traced"] + v["fp-outside"]
        out.append(f"| {code} | {sum(v.values())} | {v['tp']} | {v['fp-traced']} | {v['fp-outside']} | "
                   f"{_ratio(v['tp'], v['tp'] + fp)} | {v['unverified']} / {v['unverified-eager']} / "
                   f"{v['unverified-uncompiled']} | {sites_by_rule[code]} |")
    if not per_rule:
        out.append("| (no findings) | | | | | | | |")
    out += ["", "## Missed break sites (FN)", ""]
    for s in scores:
        for m in s["fn_sites"]:
            out.append(f"- {s['corpus']}: `{m['file']}:{m['line']}` {m['gb']} {m['type']}: `{m['source']}`")
    out += ["", "## Missed recompiles (FN)", ""]
    for s in scores:
        for m in s["fn_recompiles"]:
            out.append(f"- {s['corpus']}: `{m['function']}` ({m['kind']}) ×{m['count']} \"{m['reason']}\" lines "
                       f"{', '.join(m['lines']) or '(none in project)'}")
    out += ["", "## Wrong findings (FP, on executed lines)", ""]
    for s in scores:
        for r in s["findings"]:
            if r["verdict"].startswith("fp"):
                out.append(f"- {s['corpus']}: {r['code']} `{r['file']}:{r['line']}` ({r['verdict']}): "
                           f"`{r['source']}`")
    out += ["", "## Unverified findings (line never ran in the cases, or its frame ran eager; first 30)", ""]
    for s in scores:
        unv = [r for r in s["findings"] if r["verdict"].startswith("unverified")]
        for r in unv[:30]:
            out.append(f"- {s['corpus']}: {r['code']} `{r['file']}:{r['line']}` ({r['verdict']}): `{r['source']}`")
        if len(unv) > 30:
            out.append(f"- {s['corpus']}: … {len(unv) - 30} more (--json)")
    return "\n".join(out)


def score_all(records: list[tuple[dict, str]], xlalint: str, select: str, library: bool = False,
              entries: dict | None = None) -> dict:
    """``library``: lint each corpus's files alone with ``--assume-compiled`` (see the module's doc);
    ``entries``: corpus name -> the functions named in `compiled` there."""
    scores, errors = [], {}
    for rec, root in records:
        if library:
            tree = library_tree(root, (entries or {}).get(rec["corpus"]))
            findings, err = run_xlalint(xlalint, tree, select, ("--assume-compiled",))
        else:
            findings, err = run_xlalint(xlalint, root, select)
        if err:
            errors[rec["corpus"]] = err
        scores.append(score_corpus(rec, root, findings, library))
    return {"scores": scores, "lint_error": errors or None, "text": render(scores, errors)}
