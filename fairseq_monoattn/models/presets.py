"""Named architectures: each model of the paper is a set of defaults over ``gru_seq2seq``.

Every choice stays a command-line option, so ``--arch gru_onestep --step-activation relu``
(or any other combination) is a valid model.  Constants follow the paper's appendix and the
authors' release (see REFERENCE.md): embeddings 64, one BiGRU layer of 64 per direction,
decoder 128, dropout 0.5 on the encoder outputs, tied output embedding.
"""
from fairseq.models import register_model_architecture

from .gru_seq2seq import DEFAULT_MAX_POSITIONS


def _default(args, name, value):
    setattr(args, name, getattr(args, name, value))


@register_model_architecture("gru_seq2seq", "gru_seq2seq")
def base_architecture(args):
    _default(args, "encoder_embed_dim", 64)
    _default(args, "encoder_hidden_size", 64)
    _default(args, "encoder_layers", 1)
    _default(args, "decoder_embed_dim", 64)
    _default(args, "decoder_hidden_size", 2 * args.encoder_hidden_size)
    _default(args, "decoder_layers", args.encoder_layers)
    _default(args, "attention_dim", None)
    _default(args, "dropout", 0.5)
    _default(args, "decoder_dropout", 0.0)
    _default(args, "share_decoder_input_output_embed", True)
    _default(args, "attention_scoring", "content")
    _default(args, "location_attention", False)
    _default(args, "direction_gate", False)
    _default(args, "reference", "previous")
    _default(args, "step_activation", "sigmoid")
    _default(args, "clamp_center", False)
    _default(args, "position_reference", "mixed")
    _default(args, "sigma_min", 0.27)
    _default(args, "step_temperature", 5.0)
    _default(args, "softstair_temperature", 20.0)
    _default(args, "clamp_slope", 0.01)
    _default(args, "mono_gate_init", 20.0)
    _default(args, "mix_temperature", 5.0)
    _default(args, "direction_temperature", 5.0)
    _default(args, "max_source_positions", DEFAULT_MAX_POSITIONS)
    _default(args, "max_target_positions", DEFAULT_MAX_POSITIONS)


# name -> the options that distinguish it; every other option keeps the base default.
CONTENT = dict(attention_scoring="content")
LOCATION = dict(attention_scoring="none", location_attention=True)
LOCATTN = dict(LOCATION, reference="gated", step_activation="softstair", clamp_center=True)
LOCATTN_S = dict(LOCATTN, reference="initial-bias")
ONESTEP = dict(LOCATION, direction_gate=True, reference="previous", step_activation="sigmoid")
MONO = dict(ONESTEP, step_activation="mono")
RMONO = dict(ONESTEP, step_activation="relu")
MIX = dict(attention_scoring="content")  # mixes content scores into the location focus
PR = dict(position_reference="location")  # reference = the location-only focus

PRESETS = {
    "gru_content": CONTENT,
    "gru_relative": dict(attention_scoring="relative"),
    "gru_birelative": dict(attention_scoring="relative", direction_gate=True),
    "gru_birope": dict(attention_scoring="rotary", direction_gate=True),
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
    "gru_onestep_minus_step2": dict(ONESTEP, reference="gated"),  # LocAttn's reference g*pa + b
    "gru_onestep_minus_step3": dict(ONESTEP, step_activation="softstair"),
    "gru_onestep_minus_sigmoid": dict(ONESTEP, step_activation="none"),
}


def _register(name, overrides):
    @register_model_architecture("gru_seq2seq", name)
    def architecture(args):
        for key, value in overrides.items():
            _default(args, key, value)
        base_architecture(args)

    architecture.__name__ = name
    return architecture


for _name, _overrides in PRESETS.items():
    _register(_name, _overrides)
