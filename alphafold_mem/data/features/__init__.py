"""Model input features (Jumper et al. 2021, Suppl. 1.2), one concern per module; imports point one
way (``batch`` imports ``crop``, which imports ``spec``; ``pipeline`` imports ``msa``, ``templates``,
``ground_truth`` and ``crop``; none of them imports ``pipeline`` or ``batch``):

* :mod:`.spec`: the feature table :data:`FEATURES` (:class:`FeatureSpec`), :func:`check_features`;
* :mod:`.msa`: MSA tokens and deletion matrix, block deletion, cluster sampling, masked MSA,
  cluster profiles, ``msa_feat``;
* :mod:`.templates`: template features, :func:`align_template`, empty placeholders;
* :mod:`.ground_truth`: training / evaluation targets from the experimental chain;
* :mod:`.crop`: training crops and :func:`pad_features`;
* :mod:`.batch`: :class:`Sample`, :class:`Batch`, :func:`collate`;
* :mod:`.pipeline`: :func:`make_features`, the whole per-sample pipeline.
"""

from .batch import Batch, Sample, collate
from .crop import pad_features
from .msa import make_msa_features, msa_to_tokens
from .pipeline import MODES, make_features, make_sequence_features, sequence_to_aatype
from .spec import FEATURES, FeatureSpec, check_features
from .templates import align_template, empty_template_features, make_template_features

__all__ = [
    "FEATURES",
    "FeatureSpec",
    "check_features",
    "sequence_to_aatype",
    "msa_to_tokens",
    "make_sequence_features",
    "make_msa_features",
    "make_template_features",
    "empty_template_features",
    "align_template",
    "make_features",
    "MODES",
    "pad_features",
    "Sample",
    "Batch",
    "collate",
]
