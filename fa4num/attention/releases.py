"""FA4 release profiles: which flash-attn-4 release's numerics ``plan(..., fa4_release=...)`` emulates.

A profile is data: ``fa4num/data/releases/<release>.json`` holds the numerics-bearing facts read from that
release's wheel by ``fa4num upstream diff`` (fa4num.upstream: ``POLY_EX2``, the SM100 tuning tables, the
rescale-threshold and max_offset rules, digests of the tile / 2-CTA / pack-GQA / split rules), which releases
share them (``covers``, among the wheels examined), and the ``emulator`` section: the values and the few rule
switches the emulator follows for it. Profiles exist for the releases whose numerics differ:

- ``4.0.0b36`` (b35-b36, the default): the generic SM100 kernel for head dim 256 (1-CTA unless the 2-CTA rule
  holds), ``ex2_emu_res`` 4, fp8 rescale threshold 0 with max_offset 8;
- ``4.0.0b27`` (b26-b28): every SM100 hd256 call ran a dedicated 2-CTA kernel (``sm100_hd256_2cta_fmha_forward.py``)
  with ``ex2_emu_res`` 6 (36 of 128 columns in software), no lazy rescale, its own row-sum order, an IEEE
  division for the final scale and ``log`` for the LSE (:data:`fa4num.attention.kernels.SM100_HD256_DEDICATED`);
- ``4.0.0b23``: fp8 e4m3 with max_offset 4 and rescale threshold 4;
- ``4.0.0b22`` (b22): fp8 rescale threshold 4 with max_offset 8 (no headroom assert), descales placed in the
  wrong slots when only some are given (refused here, not emulated), the dedicated hd256 kernel;
- ``4.0.0b10`` (b10): as b22 without the dedicated hd256 kernel and without the causal fp8 tuning entry.

What a profile records but fa4num does not emulate is refused by :func:`check_problem` with a ValueError naming
the argument, never answered with another release's bits.

Examples
--------
>>> get("4.0.0b27").tuning(fp8=False)[(True, False, 256, False)]
(14, 6, 0)
>>> get("4.0.0b36").hd256_dedicated, get("4.0.0b27").hd256_dedicated
(False, True)
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

DEFAULT_RELEASE = "4.0.0b36"
RELEASES_DIR = Path(str(resources.files("fa4num") / "data" / "releases"))
_TABLES = {False: "_TUNING_CONFIG", True: "_FP8_TUNING_CONFIG"}


@dataclass(frozen=True, eq=False)
class Release:
    """One profile: its name, the releases it covers, its facts (name -> value) and the emulator's switches:

    ``rescale_threshold`` / ``max_offset``: dtype name (or "16-bit") -> value; ``offset_headroom_assert``: FA4
    asserts max_offset + rescale_threshold < log2(dtype max); ``hd256_dedicated``: SM100 head dim 256 runs the
    dedicated 2-CTA kernel; ``partial_descale_misplaced``: descales go to the wrong slots when some are None;
    ``not_emulated``: what else differs and is refused."""
    name: str
    covers: tuple
    facts: dict
    rescale_threshold: dict
    max_offset: dict
    offset_headroom_assert: bool
    hd256_dedicated: bool
    partial_descale_misplaced: bool
    not_emulated: dict

    def tuning(self, *, fp8: bool) -> dict:
        """(use_2cta, causal, hd_pad, is_sm103) -> (ex2_emu_freq, ex2_emu_res or None, ex2_emu_start_frg) of
        ``_TUNING_CONFIG`` (``fp8``: ``_FP8_TUNING_CONFIG``), from the facts."""
        prefix = _TABLES[fp8] + "["
        out = {}
        for name, v in self.facts.items():
            if name.startswith(prefix):
                key = tuple({"True": True, "False": False}.get(x, x) for x in name[len(prefix):-1].split(", "))
                key = tuple(int(x) if isinstance(x, str) else x for x in key)
                out[key] = (v["ex2_emu_freq"], v["ex2_emu_res"], v["ex2_emu_start_frg"])
        return out

    @property
    def ex2_emu_res(self) -> int:
        """``apply_exp2_convert``'s default ``ex2_emu_res`` (used where the tuning entry names none)."""
        return self.facts["apply_exp2_convert default ex2_emu_res"]

    def softmax_constants(self, dtype: str) -> tuple[float, int]:
        """(rescale_threshold, max_offset) of the SM100 forward for an input dtype."""
        key = dtype if dtype in self.rescale_threshold else "16-bit"
        return float(self.rescale_threshold[key]), int(self.max_offset[key])


def get(release=None) -> Release:
    """The profile of ``release`` (a name such as "4.0.0b27", or a Release; None: :data:`DEFAULT_RELEASE`).

    Parameters
    ----------
    release : str, Release or None

    Returns
    -------
    Release

    Raises
    ------
    ValueError
        Naming ``fa4_release`` and the known profiles, for another name.

    Examples
    --------
    >>> get().name, get("4.0.0b27").covers
    ('4.0.0b36', ('4.0.0b26', '4.0.0b27', '4.0.0b28'))
    """
    if isinstance(release, Release):
        return release
    release = DEFAULT_RELEASE if release is None else release
    if not isinstance(release, str) or not (RELEASES_DIR / f"{release}.json").exists():
        raise ValueError(f"fa4_release must be one of {known()}, got {release!r}")
    return _load(release)


@lru_cache(maxsize=None)
def _load(release: str) -> Release:
    d = json.loads((RELEASES_DIR / f"{release}.json").read_text())
    e = d["emulator"]
    return Release(name=d["release"], covers=tuple(d["covers"]), facts=d["facts"],
                   rescale_threshold=e["rescale_threshold"], max_offset=e["max_offset"],
                   offset_headroom_assert=e["offset_headroom_assert"], hd256_dedicated=d["facts"][
                       "hd256 dedicated forward kernel"], partial_descale_misplaced=e["partial_descale_misplaced"],
                   not_emulated=e.get("not_emulated", {}))


def known() -> list[str]:
    """The release profiles, oldest first.

    Parameters
    ----------
    None

    Returns
    -------
    list of str

    Examples
    --------
    >>> known()[-1] == DEFAULT_RELEASE
    True
    """
    return sorted((p.stem for p in RELEASES_DIR.glob("*.json")), key=lambda r: int(r.rsplit("b", 1)[1]))


def resolve_release(name: str) -> str:
    """The profile that covers a release name.

    Parameters
    ----------
    name : str
        A profile's name or a release it covers.

    Returns
    -------
    str

    Raises
    ------
    ValueError
        Naming ``fa4_release`` and the releases covered, when no profile covers ``name``.

    Examples
    --------
    >>> resolve_release("4.0.0b28")
    '4.0.0b27'
    """
    for rel in known():
        if name == rel or name in get(rel).covers:
            return rel
    raise ValueError(f"fa4_release must be one of {known()} or a release they cover "
                     f"({', '.join(c for r in known() for c in get(r).covers)}), got {name!r}")


def check_problem(release: Release, *, problem_fields: dict) -> None:
    """Refuse what this profile records as different from the default release but fa4num does not emulate.

    Parameters
    ----------
    release : Release
    problem_fields : dict
        What the checks read of the call: ``descales_given`` (how many of q/k/v_descale), and a bool per key
        of ``release.not_emulated`` (the call uses that feature).

    Returns
    -------
    None

    Raises
    ------
    ValueError
        Naming ``fa4_release`` and what that release computed differently.

    Examples
    --------
    >>> check_problem(get("4.0.0b27"), problem_fields={"descales_given": 0, "empty_kv": False})
    >>> check_problem(get("4.0.0b27"), problem_fields={"descales_given": 0, "empty_kv": True})
    Traceback (most recent call last):
    ...
    ValueError: fa4_release='4.0.0b27': an empty KV sequence gave O = 0 * (uninitialised TMEM), NaN possible (zero-filled in 4.0.0b36); not emulated (use fa4_release='4.0.0b36')
    """
    if release.partial_descale_misplaced and problem_fields["descales_given"] not in (0, 3):
        raise ValueError(f"fa4_release={release.name!r}: FA4 {release.name} placed q/k/v descales in the wrong "
                         "slots when only some are given (fixed in 4.0.0b23); not emulated: give all three or none")
    for what, why in release.not_emulated.items():
        if problem_fields.get(what):
            raise ValueError(f"fa4_release={release.name!r}: {why}; not emulated (use fa4_release="
                             f"{DEFAULT_RELEASE!r})")


__all__ = ["Release", "DEFAULT_RELEASE", "get", "known", "resolve_release", "check_problem"]
