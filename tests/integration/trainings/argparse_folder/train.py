"""A plain training with argparse flags and a positional dataset folder, the
way most DBNet scripts are written, with the adapter's documented lines
only (import, connect, dataset, watch, steps, backward, optimizer_step, and
the checkpoint lines of python/README.md "A plain loop, whole"):

    python train.py IMAGES_DIR [--batch-size N] [--lr LR] [--iters N] [--seed S] [--no-shuffle] [--amp]

It learns the mean brightness of each image's 24 x 24 thumbnail with a tiny
network of its own names (`features`, `pool`, `regressor`)."""
import argparse
import sys
from pathlib import Path

sys.dont_write_bytecode = True

import dbh_adapter  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402
from torch import nn  # noqa: E402


class Thumbnails(torch.utils.data.Dataset):
    def __init__(self, folder: Path):
        self.files = sorted(p for p in folder.iterdir() if p.suffix == ".png")

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        with Image.open(self.files[i]) as im:
            pixels = torch.tensor(list(im.convert("L").resize((24, 24)).getdata()), dtype=torch.float32)
        x = pixels.view(1, 24, 24) / 255.0
        return x, x.mean().view(1)


@torch.no_grad()
def brightness_scores(model, thumbnails, cutoff):
    """Precision, recall and F1 of "bright" (mean above 0.5) as the model's
    clamped prediction above `cutoff` says it."""
    hits = said = truly = 0
    for i in range(len(thumbnails)):
        x, y = thumbnails[i]
        guess = bool(model(x[None]).clamp(0, 1).item() > cutoff)
        truth = bool(y.item() > 0.5)
        hits, said, truly = hits + (guess and truth), said + guess, truly + truth
    precision = hits / said if said else 0.0
    recall = hits / truly if truly else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"val/precision": precision, "val/recall": recall, "val/f1": f1}


def main():
    ap = argparse.ArgumentParser(description="brightness regressor")
    ap.add_argument("images", type=Path, help="folder of .png images")
    ap.add_argument("--batch-size", "-b", type=int, default=4)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-shuffle", dest="shuffle", action="store_false")
    ap.add_argument("--amp", action="store_true")
    ap.add_argument("--val-every", type=int, default=0, help="validate every N steps (0: never)")
    ap.add_argument("--cutoff", type=float, default=0.5, help="brightness above which an image counts as bright")
    ap.add_argument("--shuffle-seed", type=int, default=None,
                    help="the order's seed (default: --seed); -1: a fresh order in every process")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    model = nn.Sequential()
    model.add_module("features", nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU()))
    model.add_module("pool", nn.AdaptiveAvgPool2d(1))
    model.add_module("regressor", nn.Sequential(nn.Flatten(), nn.Linear(4, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    with dbh_adapter.connect() as dbh:
        thumbnails = Thumbnails(args.images)
        data = dbh.dataset(thumbnails, names=lambda i: thumbnails.files[i].name)
        order = torch.Generator()
        order_seed = args.seed if args.shuffle_seed is None else args.shuffle_seed
        if order_seed >= 0:
            order.manual_seed(order_seed)
        else:
            order.seed()  # a nondeterministic seed: another order in every process
        loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, shuffle=args.shuffle, generator=order)
        start = 0
        if dbh.resume_path():  # `dbh bisect steps` replays from a checkpoint this loop wrote
            state = torch.load(dbh.resume_path())
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            start = state["next_step"]
            dbh.checkpoint_written(start, dbh.resume_path(), resumed=True)
        dbh.watch(model, optimizer)
        for step, (x, y) in dbh.steps(loader, max_steps=args.iters, start=start):
            dbh.backward(nn.functional.mse_loss(model(x), y))
            dbh.optimizer_step(samples=len(x))
            if args.val_every and (step + 1) % args.val_every == 0:
                dbh.report_validation(brightness_scores(model, thumbnails, args.cutoff))
            if dbh.checkpoint_due(step + 1):
                path = dbh.checkpoint_path(step + 1)
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "next_step": step + 1},
                           path)
                dbh.checkpoint_written(step + 1, path)


if __name__ == "__main__":
    main()
