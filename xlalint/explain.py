"""Rule documentation: `xlalint explain`, `xlalint rules`, and the generated docs/rules/*.md."""

from __future__ import annotations

import json
from pathlib import Path

from .diagnostics import DOCS_URL
from .rule import Rule

# What each confidence level means, for the rules whose findings rest on evidence (`Rule.evidence`).
EVIDENCE_TEXT = {
    "step": "that the code runs every step (a loop that trains or iterates a loader's batches, or a "
    "framework role such as `forward`, `training_step` or a loss, reaches it through resolved calls)",
    "value": "that the value is on the device (its origin is seen: moved to a device, a model's "
    "output, a gradient, a device loader's batch, an op on such values)",
}


def confidence_text(rule: type[Rule]) -> str:
    """What `high` and `possible` mean for this rule's findings ("" when the pattern is the finding)."""
    shown = [EVIDENCE_TEXT[e] for e in rule.evidence if e in EVIDENCE_TEXT]
    if not shown:
        return ""
    return (
        "Confidence: `high` when the evidence " + " and ".join(shown) + " was seen, and the finding shows "
        "it as its chain (`via` in the text output, `related` in JSON, `relatedLocations` in SARIF); "
        "`possible` when a link is guessed (a step function by its name only, an unresolved call, a "
        "value whose origin is not seen). Possible findings are hidden unless `--confidence possible` "
        '(or `confidence = "possible"` in the configuration).'
    )


FIX_LINE = {"always": "Fix is always available.", "sometimes": "Fix is sometimes available."}


def _summary(rule: type[Rule]) -> str:
    # summaries may hold {placeholders} filled per finding; show them generically
    import re

    return re.sub(r"\{(\w+)\}", r"<\1>", rule.summary)


def torch_lines(rule: type[Rule]) -> list[str]:
    """The torch releases a DYN rule was proven on, the graph-break ids each prints, and the
    examples whose claim does not hold on one of them."""
    if not rule.torch_proven:
        return []
    from xlalint.rules.dynamo._common import gb_page

    lines = [f"Proven on torch {', '.join(rule.torch_proven)} (its examples run under Dynamo there)."]
    by_torch = rule.gb_ids_by_torch()
    if by_torch:
        lines.append("Graph-break ids by torch release (a message names the installed torch's):")
        lines += [f"- torch {v}: " + ", ".join(f"[{gb}]({gb_page(gb)})" for gb in ids) for v, ids in by_torch.items()]
    differences: list[str] = getattr(rule, "torch_differences", list)()
    if differences:
        lines.append("Where the releases differ:")
        lines += [f"- {line}" for line in differences]
    for case, releases in rule.torch_not_held.items():
        lines += [f"Not on torch {v}: {case} ({why})." for v, why in releases.items()]
    return lines


def header(rule: type[Rule]) -> str:
    lines = [f"# {rule.name} ({rule.code})", "", f"Category: `{rule.category}`."]
    if rule.target is not None:
        lines.append(
            f"Migration to {rule.target}: off by default; on with `--target {rule.target}` (or "
            f'`target = "{rule.target}"`), or when selected explicitly (`--select {rule.code}`).'
        )
    elif rule.preview:
        lines.append(
            "Preview: off by default; on with `--preview` (or `preview = true`), or when selected "
            f"explicitly (`--select {rule.code[:3]}`)."
        )
    if rule.xla_only:
        lines.append("Runs only in files that import torch_xla or torchax.")
    for target in rule.not_for_targets:
        lines.append(f"Off with `--target {target}`: its advice points to torch_xla, which that migration leaves.")
    if rule.fix_availability in FIX_LINE:
        lines.append(FIX_LINE[rule.fix_availability])
    lines.extend(torch_lines(rule))
    if rule.code.startswith("DYN"):
        lines.append(
            "Compiled code is what a `torch.compile` of the project reaches; for model code its users "
            "compile, `--assume-compiled` (or `assume-compiled = true`) takes every `nn.Module.forward` "
            'as compiled, and `compiled = ["pkg.module:function"]` names other functions.'
        )
    confidence = confidence_text(rule)
    if confidence:
        lines.append(confidence)
    return "\n".join(lines)


def doc_page(rule: type[Rule]):
    """The rule's page as installed with the package (docs/rules/<name>.md ships as `xlalint.docs`),
    or None where it is missing (a checkout whose docs were not generated)."""
    here = Path(__file__).parent
    for folder in (here / "docs", here.parent / "docs"):  # installed (package data), a checkout
        page = folder / "rules" / f"{rule.name}.md"
        if page.is_file():
            return page
    return None


def explain_text(rule: type[Rule], output_format: str = "text") -> str:
    if output_format == "json":
        return json.dumps(rule_json(rule), indent=2)
    page = doc_page(rule)
    where = f"\nThis page: {page}\n" if page is not None else ""
    return f"{header(rule)}\n\n{rule.documentation()}\n{where}"


def rule_json(rule: type[Rule]) -> dict:
    return {
        "code": rule.code,
        "name": rule.name,
        "category": rule.category,
        "summary": _summary(rule),
        "fix_availability": rule.fix_availability,
        "xla_only": rule.xla_only,
        "preview": rule.preview,
        "target": rule.target,
        "evidence": list(rule.evidence),
        # the torch releases its Dynamo proofs pass on, and the graph-break ids each prints (DYN rules)
        "torch_proven": list(rule.torch_proven),
        "gb_ids_by_torch": {version: list(ids) for version, ids in rule.gb_ids_by_torch().items()},
        "explanation": rule.documentation(),
        "url": DOCS_URL.format(name=rule.name),
        "page": str(doc_page(rule) or ""),
    }


def rules_table(rules: list[type[Rule]], output_format: str = "text") -> str:
    if output_format == "json":
        return json.dumps([rule_json(r) for r in rules], indent=2)
    width = max(len(r.name) for r in rules)
    rows = [f"{'code':<7} {'name':<{width}} {'category':<22} {'fix':<9} {'status':<7} summary"]
    for r in rules:
        status = "preview" if r.preview else "stable"
        rows.append(f"{r.code:<7} {r.name:<{width}} {r.category:<22} {r.fix_availability:<9} {status:<7} {_summary(r)}")
    return "\n".join(rows)


def markdown_page(rule: type[Rule]) -> str:
    """docs/rules/<name>.md: generated from the rule class, never edited by hand."""
    return (
        f"<!-- generated by scripts/generate_docs.py from {rule.__module__}.{rule.__name__}; do not edit -->\n"
        f"{header(rule)}\n\n{rule.documentation()}\n"
    )
