"""Score a run's kept model on the dev set and write its test predictions for GLUE's server.

python predict.py ckpt_path=logs/runs/<run>/checkpoints/best.ckpt
python predict.py ckpt_path=... task=rte test=false
"""

import hydra
from omegaconf import DictConfig

from isotune.prediction.run import predict
from isotune.training.cli import load_env_file, user_errors_reported
from isotune.training.hydra_callbacks import InputsChecked

load_env_file()  # the current folder's .env (see .env.example), not a parent's


@hydra.main(version_base="1.3", config_path="conf", config_name="predict")
def main(cfg: DictConfig) -> None:
    with user_errors_reported(cfg):
        predict(cfg, InputsChecked.handed_over(cfg))


if __name__ == "__main__":
    main()
