"""Fine-tune an encoder on a GLUE task and measure its embedding space.

python train.py                                   # MiniLM on RTE, offline (GLUE_DIR set)
python train.py model=roberta norm=isobn task=mrpc seed=3
python train.py -m task=rte,mrpc norm=none,isobn seed=1,2,3
"""

import sys

import hydra
from omegaconf import DictConfig

from hydra_plugins.isotune_launcher.command_line import check_command_line
from isotune.training.cli import load_env_file, user_errors_reported
from isotune.training.run import train

load_env_file()  # the current folder's .env (see .env.example), not a parent's


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    """Returns the best dev primary metric, for sweepers that optimise it."""
    with user_errors_reported(cfg):
        return train(cfg)["best"].get(cfg.task.primary_metric)


if __name__ == "__main__":
    check_command_line(sys.argv[1:])  # what Hydra would refuse without the fix, with it
    main()
