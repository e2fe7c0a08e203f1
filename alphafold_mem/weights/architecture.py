"""What a parameter file's shapes say about its model, and which named preset that is.

AF2 and OpenFold files carry no config: their sizes are inferred from the parameter shapes
(:func:`alphafold_mem.weights.af2_npz.infer_architecture`), and a preset supplies the rest. The
fields the shapes decide are :data:`SHAPE_FIELDS`; two configs have the same *architecture* when
they agree on them (template sizes count only while the template embedding is on). AF2's five
models differ in templates (models 1-2) and in the pTM head (``_ptm``); models 1 and 2, and models
3, 4 and 5, have the same layers (they differ in the number of extra MSA sequences, a data setting).

:func:`choose_preset` compares a file's architecture with the preset a caller asked for, or with
the one its file name gives (``params_model_3_ptm.npz``), and names the architecture in
provenance: the first preset of :data:`NAMED_ORDER` with the same layers.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

from ..config import ModelConfig, model_config
from .keys import ParameterLoadError

__all__ = [
    "NAMED_ORDER",
    "SHAPE_FIELDS",
    "ArchitectureMismatch",
    "architecture",
    "architecture_differences",
    "choose_preset",
    "matching_presets",
]

#: Config fields (dotted paths) that parameter shapes decide.
SHAPE_FIELDS: tuple[str, ...] = (
    ("multimer", "c_m", "c_z", "c_s", "c_e")
    + tuple(
        f"{stack}.{f}"
        for stack in ("evoformer", "extra_msa")
        for f in (
            "num_blocks",
            "num_heads_msa",
            "c_hidden_msa_att",
            "num_heads_pair",
            "c_hidden_pair_att",
            "c_hidden_opm",
            "c_hidden_mul",
            "transition_n",
        )
    )
    + (
        "template.enabled",
        "c_t",
        "template.pair_stack.num_blocks",
        "template.pair_stack.num_heads_tri_att",
        "template.pair_stack.c_hidden_tri_att",
        "template.pair_stack.c_hidden_tri_mul",
        "template.pair_stack.transition_n",
        "template.pointwise_num_heads",
        "template.pointwise_c_hidden",
        "template.embed_angles",
        "structure_module.num_heads_ipa",
        "structure_module.c_ipa",
        "structure_module.num_qk_points",
        "structure_module.num_v_points",
        "structure_module.c_resnet",
        "structure_module.num_resnet_blocks",
        "heads.plddt_c_hidden",
        "heads.plddt_num_bins",
        "heads.distogram_num_bins",
        "heads.pae_enabled",
    )
)
_TEMPLATE_SIZES = frozenset(
    f for f in SHAPE_FIELDS if f == "c_t" or (f.startswith("template.") and f != "template.enabled")
)

#: Presets an architecture is named after, in order of preference: AF2's names, then ours.
NAMED_ORDER: tuple[str, ...] = (
    tuple(f"model_{i}" for i in range(1, 6))
    + tuple(f"model_{i}_ptm" for i in range(1, 6))
    + tuple(f"model_{i}_multimer_v3" for i in range(1, 6))
    + ("tiny", "demo", "tiny_multimer")
)

#: The preset that supplies what shapes cannot when neither the caller nor the file name gives one
#: and no named preset has the file's layers (:data:`DEFAULT_MULTIMER_PRESET` for AF2-Multimer files).
DEFAULT_PRESET = "model_1_ptm"
DEFAULT_MULTIMER_PRESET = "model_1_multimer_v3"


class ArchitectureMismatch(ValueError):
    """A file's architecture differs from the preset asked for (``str``: one line, the differences)."""


def _get(cfg: ModelConfig, dotted: str) -> Any:
    value: Any = cfg
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def architecture(cfg: ModelConfig) -> dict[str, Any]:
    """``cfg``'s values of :data:`SHAPE_FIELDS` (template sizes left out while templates are off)."""
    arch = {f: _get(cfg, f) for f in SHAPE_FIELDS}
    if not arch["template.enabled"]:
        arch = {f: v for f, v in arch.items() if f not in _TEMPLATE_SIZES}
    return arch


def architecture_differences(found: ModelConfig, expected: ModelConfig) -> list[str]:
    """``"field (file value vs expected value)"`` for each shape-decided field where they differ
    (template sizes only where both have a template embedding)."""
    a, b = architecture(found), architecture(expected)
    return [f"{f} ({a[f]!r} vs {b[f]!r})" for f in SHAPE_FIELDS if f in a and f in b and a[f] != b[f]]


def matching_presets(config_for: Callable[[str], ModelConfig]) -> list[str]:
    """The presets of :data:`NAMED_ORDER` with the file's layers; ``config_for(p)`` is the config the
    file gives under preset ``p`` (sizes from the shapes, the rest from ``p``)."""
    names = []
    for name in NAMED_ORDER:
        try:
            found = config_for(name)
        except ParameterLoadError:  # e.g. OpenFold head counts that do not split under this preset
            continue
        if not architecture_differences(found, model_config(name)):
            names.append(name)
    return names


def _shown(diffs: list[str]) -> str:
    return ", ".join(diffs[:6]) + (f" and {len(diffs) - 6} more" if len(diffs) > 6 else "")


def _is_multimer(config_for: Callable[[str], ModelConfig]) -> bool:
    """Whether the file holds AF2-Multimer parameters (its config under the monomer default says so,
    or that preset is refused for its kind)."""
    try:
        return config_for(DEFAULT_PRESET).multimer
    except ParameterLoadError:
        return config_for(DEFAULT_MULTIMER_PRESET).multimer


def _kind_mismatch(file_is_multimer: bool, preset: str, requested: bool) -> str:
    """One line: the file holds AF2-Multimer parameters and ``preset`` is a monomer preset, or the reverse."""
    held = "AF2-Multimer" if file_is_multimer else "monomer AF2"
    kind = "a monomer" if file_is_multimer else "an AF2-Multimer"
    use = "a *_multimer_v3 preset" if file_is_multimer else "a monomer preset (model_1 ... model_5_ptm)"
    said = f"preset '{preset}' was requested" if requested else f"the file name says '{preset}'"
    return f"the parameters are {held} but {said}, {kind} model: use {use}"


def choose_preset(
    config_for: Callable[[str], ModelConfig],
    requested: Union[str, ModelConfig, None] = None,
    from_name: Optional[str] = None,
) -> tuple[str, str]:
    """The preset to build a shape-inferred model with, and a note naming its architecture.

    Args:
        config_for: the config the file gives under a preset name (sizes from its shapes).
        requested: the preset (or full config) the caller asked for; the file must have its layers.
        from_name: the preset the file name gives (``params_model_3_ptm.npz``); the file must have
            its layers too.

    With neither, the first preset of :data:`NAMED_ORDER` with the file's layers is used (others with
    the same layers are listed in the note); with none matching, :data:`DEFAULT_PRESET`.

    Raises:
        ArchitectureMismatch: the file's layers differ from ``requested`` or ``from_name`` (one line,
            the differing fields with the file's value first, and the preset the file does match;
            an AF2-Multimer file under a monomer preset, or the reverse, is named as such).
        ParameterLoadError: the shapes cannot be read as a model (from ``config_for``).
    """
    expected = model_config(requested) if isinstance(requested, str) else requested
    named = expected.preset if expected is not None else from_name
    if named is not None:
        found, wanted = config_for(named), expected or model_config(named)
        if found.multimer != wanted.multimer:
            raise ArchitectureMismatch(_kind_mismatch(found.multimer, named, expected is not None))
        diffs = architecture_differences(found, wanted)
        if not diffs:
            return named, f"architecture {named}"
        matches = matching_presets(config_for)
        what = f"the layers of {matches[0]}" if matches else "layers of no named preset"
        if expected is not None:
            raise ArchitectureMismatch(
                f"the parameters have {what}, not those of preset '{named}' (file vs preset: {_shown(diffs)}); "
                "omit --preset to run the file's own architecture"
            )
        raise ArchitectureMismatch(
            f"the file name says '{named}' but the parameters have {what} (file vs {named}: {_shown(diffs)}); "
            + (f"pass --preset {matches[0]} or rename the file" if matches else "rename the file")
        )
    matches = matching_presets(config_for)
    if not matches:
        default = DEFAULT_MULTIMER_PRESET if _is_multimer(config_for) else DEFAULT_PRESET
        return (
            default,
            f"architecture inferred from the shapes (no named preset has it; rest from {default})",
        )
    same = f" (same layers as {', '.join(matches[1:])})" if len(matches) > 1 else ""
    return matches[0], f"architecture {matches[0]}{same}"
