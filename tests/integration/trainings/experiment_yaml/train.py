"""A training configured by a positional experiment file plus a few flags,
as MhLiao/DB's train.py is (`python train.py experiments/x.yaml --batch_size
8 --lr 0.007`): a flag given overrides the file, every other key (the
dataset, the iterations) is the file's alone. The file uses YAML tags and
anchors. The adapter's documented lines only.

    python train.py EXPERIMENT.yaml [--batch_size N] [--lr LR]"""
import argparse
import sys
from pathlib import Path

sys.dont_write_bytecode = True

import dbh_adapter  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402
from PIL import Image  # noqa: E402
from torch import nn  # noqa: E402


class Loader(yaml.SafeLoader):
    pass


# MhLiao/DB names classes in its experiments with `!!python/name:`; this
# training reads the tag's name only.
Loader.add_multi_constructor("tag:yaml.org,2002:python/name:", lambda loader, suffix, node: suffix)


class Pixels(torch.utils.data.Dataset):
    def __init__(self, folder: Path, side: int):
        self.paths = sorted(folder.glob("*.png"))
        self.side = side

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        with Image.open(self.paths[i]) as im:
            x = torch.tensor(list(im.convert("L").resize((self.side, self.side)).getdata()), dtype=torch.float32)
        x = x.view(1, self.side, self.side) / 255.0
        return {"img": x, "target": 1.0 - x.mean().view(1)}


def dark_pixel_scores(net, pixels, cutoff):
    """Pixel-level precision and recall of the dark pixels, found as those
    whose darkness, weighed by the predicted darkness share, exceeds `cutoff`."""
    tp = fp = fn = 0.0
    with torch.no_grad():
        for i in range(len(pixels)):
            item = pixels[i]
            share = net(item["img"][None]).clamp(0, 1).item()
            dark = item["img"] < 0.5
            predicted = ((1.0 - item["img"]) * (0.5 + share)).clamp(0, 1) > cutoff
            tp += float((predicted & dark).sum())
            fp += float((predicted & ~dark).sum())
            fn += float((~predicted & dark).sum())
    p = tp / (tp + fp) if tp + fp > 0 else 0.0
    r = tp / (tp + fn) if tp + fn > 0 else 0.0
    return {"val/precision": p, "val/recall": r, "val/hmean": 2 * p * r / (p + r) if p + r > 0 else 0.0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("exp", type=str)
    ap.add_argument("--batch_size", type=int, default=None)
    ap.add_argument("--lr", type=float, default=None)
    args = ap.parse_args()
    with open(args.exp) as f:
        exp = yaml.load(f, Loader=Loader)
    hp = exp["train"]
    if args.batch_size is not None:
        hp["batch_size"] = args.batch_size
    if args.lr is not None:
        exp["optimizer"]["lr"] = args.lr
    torch.manual_seed(hp["seed"])
    torch.set_num_threads(1)
    net = nn.Sequential()
    net.add_module("encoder", nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.Tanh()))
    net.add_module("squeeze", nn.Sequential(nn.AdaptiveMaxPool2d(1), nn.Flatten()))
    net.add_module("out", nn.Linear(3, 1))
    opt = torch.optim.SGD(net.parameters(), lr=exp["optimizer"]["lr"], momentum=exp["optimizer"]["momentum"])
    dbh = dbh_adapter.connect(config=exp)
    pixels = Pixels(Path(hp["data_dir"]), exp["model"]["side"])
    data = dbh.dataset(pixels, names=[p.name for p in pixels.paths])
    order = torch.Generator()
    if hp["order_seed"] >= 0:
        order.manual_seed(hp["order_seed"])
    else:
        order.seed()  # a fresh order in every process
    batches = torch.utils.data.DataLoader(data, batch_size=hp["batch_size"], shuffle=hp["shuffle"], generator=order)
    with dbh:
        dbh.watch(net, opt)
        val = exp["validation"]
        for step, batch in dbh.steps(batches, max_steps=hp["iterations"]):
            dbh.backward(nn.functional.mse_loss(net(batch["img"]), batch["target"]))
            dbh.optimizer_step(samples=len(batch["img"]))
            if val["every"] > 0 and (step + 1) % val["every"] == 0:
                dbh.report_validation(dark_pixel_scores(net, pixels, val["cutoff"]))


if __name__ == "__main__":
    main()
