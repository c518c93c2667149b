"""Compare a fine-tuned checkpoint's embedding space with its pre-trained encoder's (T1-T5).

python analyze.py ckpt_path=logs/runs/<run>/checkpoints/best.ckpt
python analyze.py ckpt_path=... data.dev_examples=null logger=wandb
"""

import hydra
from omegaconf import DictConfig

from isotune.analysis.run import analyze
from isotune.training.cli import load_env_file, user_errors_reported

load_env_file()  # the current folder's .env (see .env.example), not a parent's


@hydra.main(version_base="1.3", config_path="conf", config_name="analyze")
def main(cfg: DictConfig) -> None:
    with user_errors_reported(cfg):
        analyze(cfg)


if __name__ == "__main__":
    main()
