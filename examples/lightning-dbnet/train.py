"""Train DBNet-lite with PyTorch Lightning, configured by Hydra (configs/train.yaml).

    python examples/lightning-dbnet/train.py trainer.max_steps=5
"""
import os
import sys

sys.dont_write_bytecode = True  # keep the project folder clean (no __pycache__/)
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS when run on a GPU

import dbh_adapter  # noqa: E402
import hydra  # noqa: E402
import lightning as L  # noqa: E402
import torch  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from data import DBNetDataModule  # noqa: E402
from dbnet_lite import DBNetLite  # noqa: E402


@hydra.main(version_base="1.3", config_path="configs", config_name="train")
def main(cfg: DictConfig) -> None:
    dbh = dbh_adapter.connect(config=cfg)  # cfg: what `dbh scenario from-command --external` maps its keys into

    L.seed_everything(cfg.seed, workers=True)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(cfg.threads)

    module = DBNetLite(OmegaConf.to_container(cfg.model, resolve=True))
    datamodule = DBNetDataModule(cfg, dbh)

    trainer = L.Trainer(
        **OmegaConf.to_container(cfg.trainer, resolve=True),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[*dbh.lightning_callbacks()],
    )
    trainer.fit(module, datamodule=datamodule, ckpt_path=dbh.resume_path())


if __name__ == "__main__":
    main()
