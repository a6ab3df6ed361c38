"""A training configured as PaddleOCR's tools/train.py is: `-c FILE` names a
YAML config and `-o Key.sub=value ...` overrides its keys, each value read as
YAML. The adapter's documented lines only.

    python train.py -c configs/det.yml [-o Global.max_iters=4 Optimizer.lr.learning_rate=0.01 ...]"""
import argparse
import sys
from pathlib import Path

sys.dont_write_bytecode = True

import dbh_adapter  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402
from PIL import Image  # noqa: E402
from torch import nn  # noqa: E402


def load_config(path, opts):
    with open(path) as f:
        cfg = yaml.safe_load(f)
    for item in opts or []:
        key, _, text = item.partition("=")
        node = cfg
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = yaml.safe_load(text)
    return cfg


class SimpleDataSet(torch.utils.data.Dataset):
    def __init__(self, data_dir, side):
        self.files = sorted(Path(data_dir).glob("*.png"))
        self.side = side

    def __len__(self):
        return len(self.files)

    def __getitem__(self, idx):
        with Image.open(self.files[idx]) as im:
            rgb = torch.tensor(list(im.convert("RGB").resize((self.side, self.side)).getdata()), dtype=torch.float32)
        img = rgb.t().reshape(3, self.side, self.side) / 255.0
        return [img, img.std().view(1)]


class Detector(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 6, 3, stride=2, padding=1), nn.ReLU())
        self.neck = nn.Sequential(nn.Conv2d(6, 6, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(6, 1)

    def forward(self, x):
        return self.head(self.neck(self.backbone(x)).flatten(1))


def evaluate(model, dataset, cutoff):
    """Textured images (std above 0.1) found as those the model scores above
    `cutoff`: precision, recall, F1."""
    with torch.no_grad():
        pairs = [(model(img[None]).item() > cutoff, target.item() > 0.1) for img, target in dataset]
    tp = sum(1 for found, real in pairs if found and real)
    precision = tp / max(1, sum(1 for found, _ in pairs if found))
    recall = tp / max(1, sum(1 for _, real in pairs if real))
    return {"val/precision": precision, "val/recall": recall,
            "val/f1": 0.0 if tp == 0 else 2 * precision * recall / (precision + recall)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-c", "--config", required=True, help="configuration file")
    parser.add_argument("-o", "--opt", nargs="+", help="set configuration options")
    args = parser.parse_args()
    cfg = load_config(args.config, args.opt)
    g, loader_cfg = cfg["Global"], cfg["Train"]["loader"]
    torch.manual_seed(g["seed"])
    torch.set_num_threads(1)
    model = Detector()
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg["Optimizer"]["lr"]["learning_rate"], momentum=0.9)
    dbh = dbh_adapter.connect(config=cfg)
    simple = SimpleDataSet(cfg["Train"]["dataset"]["data_dir"], g["image_side"])
    dataset = dbh.dataset(simple, names=lambda idx: simple.files[idx].name)
    generator = torch.Generator()
    generator.manual_seed(loader_cfg["seed"]) if loader_cfg["seed"] >= 0 else generator.seed()
    loader = torch.utils.data.DataLoader(dataset, batch_size=loader_cfg["batch_size_per_card"],
                                         shuffle=loader_cfg["shuffle"], generator=generator)
    with dbh:
        dbh.watch(model, optimizer)
        every, cutoff = cfg["Eval"]["every"], cfg["Eval"]["cutoff"]
        for step, (img, target) in dbh.steps(loader, max_steps=g["max_iters"]):
            dbh.backward(nn.functional.mse_loss(model(img), target))
            dbh.optimizer_step(samples=len(img))
            if every and (step + 1) % every == 0:
                dbh.report_validation(evaluate(model, simple, cutoff))


if __name__ == "__main__":
    main()
