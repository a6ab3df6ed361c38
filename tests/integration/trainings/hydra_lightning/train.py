"""A Lightning training configured by Hydra, with its own key names
(`optim.step_size`, `loader.per_step`, `run.updates`):

    python train.py optim.step_size=0.05 run.updates=4

The adapter's documented lines only (connect with the composed config,
dataset, the trainer's callbacks)."""
import sys
from pathlib import Path

sys.dont_write_bytecode = True

import dbh_adapter  # noqa: E402
import hydra  # noqa: E402
import lightning as L  # noqa: E402
import torch  # noqa: E402
from omegaconf import DictConfig  # noqa: E402
from PIL import Image  # noqa: E402
from torch import nn  # noqa: E402


class Tiles(torch.utils.data.Dataset):
    def __init__(self, folder: str, side: int):
        self.names = sorted(p.name for p in Path(folder).glob("*.png"))
        self.folder, self.side = Path(folder), side

    def __len__(self):
        return len(self.names)

    def __getitem__(self, k):
        with Image.open(self.folder / self.names[k]) as im:
            red = torch.tensor(list(im.convert("RGB").getchannel("R").resize((self.side, self.side)).getdata()))
        red = red.float().view(1, self.side, self.side) / 255.0
        return red, (red > 0.5).float().mean().view(1)


class Redness(L.LightningModule):
    def __init__(self, step_size: float, threshold: float):
        super().__init__()
        self.step_size, self.threshold = step_size, threshold
        self.trunk = nn.Sequential(nn.Conv2d(1, 5, 5, padding=2), nn.GELU())
        self.pool = nn.AdaptiveAvgPool2d(2)
        self.readout = nn.Linear(20, 1)

    def forward(self, x):
        return self.readout(self.pool(self.trunk(x)).flatten(1))

    def training_step(self, batch, _):
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def validation_step(self, batch, _):
        x, y = batch
        said, real = self(x).clamp(0, 1) > self.threshold, y > 0.2
        tp = float((said & real).sum())
        p, r = tp / max(1.0, float(said.sum())), tp / max(1.0, float(real.sum()))
        self.log("val/f1", 2 * p * r / (p + r) if p + r else 0.0)
        self.log("val/precision", p)
        self.log("val/recall", r)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.step_size, momentum=0.8)


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    torch.manual_seed(cfg.run.seed)
    torch.set_num_threads(1)
    dbh = dbh_adapter.connect(config=cfg)
    raw = Tiles(cfg.loader.folder, cfg.loader.side)
    tiles = dbh.dataset(raw, names=lambda k: raw.names[k])
    gen = torch.Generator()
    _ = gen.seed() if cfg.loader.order_seed < 0 else gen.manual_seed(cfg.loader.order_seed)
    train = torch.utils.data.DataLoader(tiles, batch_size=cfg.loader.per_step, shuffle=cfg.loader.shuffle,
                                        generator=gen)
    every = cfg.run.validate_every
    trainer = L.Trainer(max_steps=cfg.run.updates, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        limit_val_batches=1.0 if every else 0, val_check_interval=every or None,
                        callbacks=dbh.lightning_callbacks())
    val = torch.utils.data.DataLoader(Tiles(cfg.loader.folder, cfg.loader.side), batch_size=cfg.loader.per_step)
    trainer.fit(Redness(cfg.optim.step_size, cfg.score.threshold), train, val if every else None,
                ckpt_path=dbh.resume_path())


if __name__ == "__main__":
    main()
