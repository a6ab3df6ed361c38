"""A plain PyTorch training loop (no Lightning, no Hydra) run under dbh.

    python examples/plain-torch/train.py --steps 20 --lr 0.05 --batch-size 8 --seed 0 [--precision 16-mixed]

A small convolutional regressor on generated images, trained with SGD. The
adapter's calls (connect, watch, steps, backward, optimizer_step) are all
it takes for `dbh run`, `repeat` and `bisect` to work on it
(scenarios/nan-in-body.yaml; README "Your own training"). `--precision`
takes the values dbh passes for train.precision (docs/worker-protocol.md):
16-mixed or bf16-mixed train under autocast (PyTorch's AMP recipe, on the CPU
too), 16-mixed with a loss scaler the adapter steps (scenarios/fp16-*.yaml).
"""
import argparse
import sys

sys.dont_write_bytecode = True

import dbh_adapter  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.body = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 1))

    def forward(self, x):
        return self.head(self.body(self.stem(x)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--precision", choices=["32-true", "16-mixed", "bf16-mixed"], default="32-true")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    images = torch.randn(64, 1, 16, 16)
    targets = images.mean(dim=(1, 2, 3)).unsqueeze(1)
    batches = [{"image": images[i:i + a.batch_size], "target": targets[i:i + a.batch_size],
                "id": [f"sample_{j:02d}" for j in range(i, min(i + a.batch_size, 64))]}
               for i in range(0, 64, a.batch_size)]
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    dtype = {"32-true": None, "16-mixed": torch.float16, "bf16-mixed": torch.bfloat16}[a.precision]
    scaler = torch.amp.GradScaler("cpu") if dtype == torch.float16 else None
    with dbh_adapter.connect() as dbh:  # outside dbh: an inactive session, the same loop
        dbh.watch(model, optimizer, scaler=scaler)
        for step, batch in dbh.steps(batches, max_steps=a.steps):
            with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                loss = nn.functional.mse_loss(model(batch["image"]).float(), batch["target"])
            dbh.backward(loss)
            dbh.optimizer_step(samples=len(batch["id"]))
            if step % 5 == 0:
                print(f"step {step} loss {loss.item():.5f}", flush=True)

if __name__ == "__main__":
    main()
