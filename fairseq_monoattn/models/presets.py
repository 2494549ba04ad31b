"""Named architectures: each model of the paper is a set of options over ``gru_seq2seq``, and
:func:`register_preset` registers a preset over either of the plugin's models (the GRU's, the
Transformer's), the plugin's own and a user's package's alike.

A preset holds only the options it differs in; every other option keeps its default
(``options.py``), and every option stays settable on the command line, so
``--arch gru_onestep --step-activation relu`` (or any other combination) is a valid model.
``gru_seq2seq.py`` registers each preset of :data:`PRESETS` twice over: as an architecture
(``--arch NAME``) and as a hydra config (``model._name=NAME``).  This module does not import
fairseq (:func:`register_preset` imports the model's module when called).
"""

import importlib
from typing import Any, Dict, Mapping

# fairseq's name of each model a preset may be over -> its module here and that module's function
# registering a preset over it
PRESET_MODELS = {
    "gru_seq2seq": ("gru_seq2seq", "register_gru_preset"),
    "transformer_location": ("transformer_monoattn", "register_transformer_preset"),
}


def register_preset(name: str, options: Mapping[str, Any], model: str = "gru_seq2seq") -> None:
    """Register ``--arch NAME``: ``model`` (``gru_seq2seq``, the paper's GRU encoder-decoder, or
    ``transformer_location``, fairseq's Transformer with location attention) with ``options`` set;
    the command line can still change each of them.  The options are checked now: one the model
    does not have, an entry name no registry knows or a value out of range is an OptionError (one
    line under fairseq's commands) naming the preset and the option.  A user's package calls it
    for presets of its own, as the plugin does for its own."""
    if model not in PRESET_MODELS:
        from .options import preset_error

        raise preset_error(name, f"model must be one of {', '.join(PRESET_MODELS)}, got {model!r}")
    module, function = PRESET_MODELS[model]
    getattr(importlib.import_module(f"{__package__}.{module}"), function)(name, options)


# How the authors' release trains every model, where fairseq's habits differ: ``--conventions
# presets`` (``CONVENTIONS`` in options.py lists the group's values and the runs behind each; RESULTS.md,
# "What in the training matters"), and the content/location mix m = sigmoid(f_mix(h)) without the
# paper's beta = 5 (with beta = 5 Mix OneStep solves Copy, 100 / 100 / 99.15 for seed 1, where the paper
# and beta = 1 fail it: RESULTS.md, "The mix temperature").  One embedding matrix shared by encoder and
# decoder (--share-all-embeddings True), as the release, is left out: it needs a joined dictionary and
# slowed learning in the runs (valid accuracy after epoch 1: 27 with it, 91 without, MonoAttn on Inv
# ReCopy).
AUTHORS_TRAINING = dict(conventions="presets", mix_temperature=1.0)

# name -> the options that distinguish it; every other option keeps the base default.
CONTENT = dict(AUTHORS_TRAINING, attention_scoring="content")
LOCATION = dict(AUTHORS_TRAINING, attention_scoring="none", location_attention=True)
LOCATTN = dict(LOCATION, reference="gated", step_activation="softstair", clamp_center=True)
LOCATTN_S = dict(LOCATTN, reference="initial-bias")
ONESTEP = dict(LOCATION, direction_gate=True, reference="previous", step_activation="sigmoid")
MONO = dict(ONESTEP, step_activation="mono")
RMONO = dict(ONESTEP, step_activation="relu")
MIX = dict(attention_scoring="content")  # mixes content scores into the location focus
PR = dict(position_reference="location")  # reference = the location-only focus

PRESETS: Dict[str, Dict[str, Any]] = {
    "gru_content": CONTENT,
    "gru_relative": dict(AUTHORS_TRAINING, attention_scoring="relative"),
    "gru_birelative": dict(AUTHORS_TRAINING, attention_scoring="relative", direction_gate=True),
    "gru_birope": dict(AUTHORS_TRAINING, attention_scoring="rotary", direction_gate=True),
    "gru_locattn": LOCATTN,
    "gru_mix_locattn": dict(LOCATTN, **MIX),
    "gru_locattn_s": LOCATTN_S,
    "gru_mix_locattn_s": dict(LOCATTN_S, **MIX),
    "gru_mix_locattn_s_pr": dict(LOCATTN_S, **MIX, **PR),
    "gru_onestep": ONESTEP,
    "gru_mix_onestep": dict(ONESTEP, **MIX),
    "gru_mix_onestep_pr": dict(ONESTEP, **MIX, **PR),
    "gru_monoattn": MONO,
    "gru_mix_monoattn": dict(MONO, **MIX),
    "gru_mix_monoattn_pr": dict(MONO, **MIX, **PR),
    "gru_rmonoattn": RMONO,
    "gru_mix_rmonoattn": dict(RMONO, **MIX),
    "gru_mix_rmonoattn_pr": dict(RMONO, **MIX, **PR),
    # ablations of OneStep (paper Table 3)
    # LocAttn's reference g*pa + b, with LocAttn's leaky clamp of mu (as the release's ablation
    # clamps it), step, gate and bias vectors drawn as one tensor there too
    "gru_onestep_minus_step2": dict(ONESTEP, reference="gated", clamp_center=True),
    "gru_onestep_minus_step3": dict(ONESTEP, step_activation="softstair"),
    "gru_onestep_minus_sigmoid": dict(ONESTEP, step_activation="none"),
}
