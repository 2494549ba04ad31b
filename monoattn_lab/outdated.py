"""Outdated-record checks: whether a trained model (a checkpoint's configuration, a record's
``model_config``) is the one its command builds today, once a preset or a default has changed:
a resumed checkpoint of another model is refused, and the records of another model are listed
(:func:`outdated_records`) with the options that would build theirs again."""

from pathlib import Path
from typing import Dict, List, Optional, Tuple

from .spec import RunError, model_and_task, planned_model_config, spec_from_dict, train_command


def check_checkpoint_matches(checkpoint: Path, command: List[str]) -> None:
    """Resuming continues the checkpoint's weights under the model the command builds *today*;
    the same command line builds another model once a default has changed (an init, the
    normalisation, ...), which would mix two models in one run without a word."""
    changed = model_differences(trained_model_config(checkpoint), planned_model_config(command))
    if changed:
        raise RunError(
            f"{checkpoint} was trained with other model options than its command builds now "
            f"({describe_differences(changed, 'in the checkpoint')}), the defaults changed since it "
            f"started; nothing was changed: use another work folder, or delete the run folder to "
            f"start it again"
        )


def model_differences(trained: dict, planned: dict) -> Dict[str, tuple]:
    """{option: (trained value, planned value)} over the options either model reads.  An option
    the trained config lacks (it predates the option) counts as its base default, since every
    option was added with the old behaviour as its default."""
    from fairseq_monoattn.models.options import option_defaults, unused_options

    trained = {**option_defaults(), **trained}
    no_op = unused_options(trained) & unused_options(planned)  # e.g. the mix temperature of OneStep
    return {
        key: (trained[key], planned[key])
        for key in sorted(set(trained) & set(planned) - no_op)
        if trained[key] != planned[key]
    }


def describe_differences(changed: Dict[str, tuple], where: str) -> str:
    return "; ".join(f"{key}: {old!r} {where}, {new!r} now" for key, (old, new) in changed.items())


def pinning_options(changed: Dict[str, tuple]) -> Optional[List[str]]:
    """The fairseq-train options that build today the model a record trained (its values of the
    ``changed`` model options, :func:`model_differences`), to add to the record's ``options``
    when it moves to a variant of its own; None when a difference is not a model option of one
    value (a task option, an option then unset)."""
    options = []
    for key, (old, _new) in changed.items():
        if key == "task" or old is None or isinstance(old, (dict, list)):
            return None
        options += [f"--{key.replace('_', '-')}", str(old)]
    return options


def outdated_records(records: List[dict]) -> List[Tuple[dict, Dict[str, tuple]]]:
    """The records whose trained model is not the one their command builds today (a preset or a
    default changed since they ran), each with what changed.  A record without a model config
    (an early record version) cannot be checked and is not listed."""
    planned_by_command, outdated = {}, []
    for record in records:
        if not record.get("model_config"):
            continue
        spec = spec_from_dict(record)
        command = tuple(train_command(spec, Path("data"), Path("run")))
        key = command[: command.index("--seed")] + command[command.index("--seed") + 2 :]  # seeds share a model
        if key not in planned_by_command:
            planned_by_command[key] = planned_model_config(list(command))
        changed = model_differences(record["model_config"], planned_by_command[key])
        if changed:
            outdated.append((record, changed))
    return outdated


def trained_model_config(checkpoint: Path) -> dict:
    """Every option of the trained model as its checkpoint recorded it (the preset's and the
    defaults of the day included), and the task options that change training."""
    import torch

    from fairseq_monoattn.checkpoint_classes import reading_fairseq_checkpoints

    try:
        with reading_fairseq_checkpoints():  # a Transformer's options
            state = torch.load(checkpoint, map_location="cpu", weights_only=True)
        return model_and_task(state["cfg"])
    except Exception as error:  # torch's unpickler raises many kinds for a damaged file
        raise RunError(
            f"{checkpoint}: cannot read its configuration ({type(error).__name__}: "
            f"{str(error).strip()[:200]}); delete the file to start that run again"
        ) from None
