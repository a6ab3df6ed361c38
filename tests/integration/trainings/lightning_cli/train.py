"""A LightningCLI training, run as `python train.py fit --config config.yaml
[--model.lr 0.05] [--trainer.max_steps 4]`: the module's and the data
module's arguments are the CLI's keys. The adapter's documented lines only
(connect, dataset, the trainer's callbacks)."""
import sys
from pathlib import Path

sys.dont_write_bytecode = True

import dbh_adapter  # noqa: E402
import lightning as L  # noqa: E402
import torch  # noqa: E402
from lightning.pytorch.cli import LightningCLI  # noqa: E402
from PIL import Image  # noqa: E402
from torch import nn  # noqa: E402

dbh = dbh_adapter.connect()


class Crops(torch.utils.data.Dataset):
    def __init__(self, root: str, side: int):
        self.files = sorted(Path(root).glob("*.png"))
        self.side = side

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        with Image.open(self.files[i]) as im:
            g = torch.tensor(list(im.convert("L").resize((self.side, self.side)).getdata()), dtype=torch.float32)
        g = g.view(1, self.side, self.side) / 255.0
        return {"pixels": g, "label": (g > 0.5).float().mean().view(1)}


class CropData(L.LightningDataModule):
    def __init__(self, root: str = "", batch_size: int = 2, side: int = 16, shuffle: bool = False,
                 order_seed: int = 0):
        super().__init__()
        self.root, self.batch_size, self.side = root, batch_size, side
        self.shuffle, self.order_seed = shuffle, order_seed

    def val_dataloader(self):
        return torch.utils.data.DataLoader(Crops(self.root, self.side), batch_size=self.batch_size)

    def train_dataloader(self):
        crops = Crops(self.root, self.side)
        data = dbh.dataset(crops, names=lambda i: crops.files[i].name)
        order = torch.Generator()
        if self.order_seed < 0:
            order.seed()  # another order in every process
        else:
            order.manual_seed(self.order_seed)
        return torch.utils.data.DataLoader(data, batch_size=self.batch_size, shuffle=self.shuffle, generator=order)


class Bright(L.LightningModule):
    def __init__(self, lr: float = 0.05, channels: int = 4, cutoff: float = 0.3):
        super().__init__()
        self.lr, self.cutoff = lr, cutoff
        self.stem = nn.Sequential(nn.Conv2d(1, channels, 3, padding=1), nn.ReLU())
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, 1)

    def forward(self, x):
        return self.fc(self.gap(self.stem(x)).flatten(1))

    def training_step(self, batch, batch_idx):
        return nn.functional.mse_loss(self(batch["pixels"]), batch["label"])

    def validation_step(self, batch, batch_idx):
        said = self(batch["pixels"]).clamp(0, 1) > self.cutoff
        real = batch["label"] > 0.3
        tp = (said & real).sum().float()
        precision = tp / said.sum().clamp(min=1)
        recall = tp / real.sum().clamp(min=1)
        self.log_dict({"val/precision": precision, "val/recall": recall,
                       "val/f1": 2 * precision * recall / (precision + recall).clamp(min=1e-12)})

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


if __name__ == "__main__":
    torch.set_num_threads(1)
    LightningCLI(Bright, CropData, trainer_defaults={"callbacks": dbh.lightning_callbacks(), "logger": False,
                                                     "enable_checkpointing": False, "enable_progress_bar": False,
                                                     "enable_model_summary": False},
                 save_config_callback=None)
