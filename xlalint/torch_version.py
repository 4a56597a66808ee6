"""The installed torch's release, read from package metadata without importing torch (importing it
takes seconds and may touch a device): the DYN rules name the graph-break id that release prints."""

from __future__ import annotations

import re
from functools import lru_cache


@lru_cache(maxsize=1)
def installed_torch() -> str | None:
    """`"2.11"` for torch 2.11.0+cu130 installed in this environment; None when torch is absent
    (or its metadata names no release). importlib.metadata is imported here, when a message needs
    it: it costs a run that needs none (a warm one) ~15 ms of start-up."""
    from importlib import metadata

    try:
        version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None
    found = re.match(r"(\d+)\.(\d+)", version or "")
    return f"{found[1]}.{found[2]}" if found else None


def version_key(version: str) -> tuple[int, ...]:
    """`"2.11"` -> (2, 11), to order releases."""
    return tuple(int(p) for p in version.split("."))


def gb_for_installed(ids: dict[str, str | None]) -> str:
    """The graph-break id to name for the installed torch, from the ids by proven release (None:
    no break there). On a proven release: its id. Elsewhere (an unproven release, or no torch
    installed): an id every proven release prints, plainly; else the newest proven id, qualified
    by its release ("GB4198 on torch 2.13"), so no message names an id as if every torch printed it."""
    newest = max(ids, key=version_key)
    installed = installed_torch()
    if installed in ids:
        gb = ids[installed]
        return gb if gb is not None else f"no graph-break id on torch {installed}"
    if len(set(ids.values())) == 1 and ids[newest] is not None:
        return str(ids[newest])
    return f"{ids[newest]} on torch {newest}"
