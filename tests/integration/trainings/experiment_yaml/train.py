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
    batches = torch.utils.data.DataLoader(data, batch_size=hp["batch_size"], shuffle=False)
    with dbh:
        dbh.watch(net, opt)
        for _, batch in dbh.steps(batches, max_steps=hp["iterations"]):
            dbh.backward(nn.functional.mse_loss(net(batch["img"]), batch["target"]))
            dbh.optimizer_step(samples=len(batch["img"]))


if __name__ == "__main__":
    main()
