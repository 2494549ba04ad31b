"""One rank of fairseq-train that also writes the rank's final parameters.

    python tests/distributed_worker.py PARAMS.pt FAIRSEQ-TRAIN-ARGUMENTS...

fairseq writes checkpoints from rank 0 only.  This runs fairseq_cli.train.main as
fairseq-train does, records the Trainer it creates, and saves that trainer's model
state_dict at the end, so that a test can compare the ranks.
"""

import sys

import torch
from fairseq import distributed_utils, options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq_cli import train as train_cli


def train_and_save_parameters(params_path, argv):
    trainers = []

    class RecordingTrainer(train_cli.Trainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            trainers.append(self)

    train_cli.Trainer = RecordingTrainer
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    distributed_utils.call_main(convert_namespace_to_omegaconf(args), train_cli.main)
    torch.save(trainers[0].get_model().state_dict(), params_path)


if __name__ == "__main__":
    train_and_save_parameters(sys.argv[1], sys.argv[2:])
