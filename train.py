"""Fine-tune an encoder on a GLUE task and measure its embedding space.

python train.py                                   # MiniLM on RTE, offline (GLUE_DIR set)
python train.py model=roberta norm=isobn task=mrpc seed=3
python train.py -m task=rte,mrpc norm=none,isobn seed=1,2,3
"""

import logging
import sys

import hydra
from dotenv import load_dotenv
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from isotune.errors import IsotuneError
from isotune.training import train

log = logging.getLogger("train")
load_dotenv()  # .env (see .env.example): GLUE_DIR, HF_HUB_OFFLINE, WANDB_*


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    try:
        results = train(cfg)
    except IsotuneError as error:
        log.error("%s", error)  # a problem the user can fix: one message, no traceback
        if HydraConfig.get().mode == RunMode.RUN:
            sys.exit(1)
        raise  # in a sweep: the job is marked failed, the other jobs go on
    log.info("Output directory: %s", cfg.paths.output_dir)
    return results["best"].get(cfg.task.primary_metric)


if __name__ == "__main__":
    main()
