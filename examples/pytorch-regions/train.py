"""Train a text-region segmenter in plain PyTorch, configured by config.json and `section.key=value` arguments.

    python examples/pytorch-regions/train.py run.updates=20 optim.step_size=0.02 dataset.root=/abs/path
    python examples/pytorch-regions/train.py --print-config [overrides...]   # the composed config, as JSON

No Lightning, no Hydra: its own config (config.json), its own module names (stem, body.<k>, bridge, readout), a
DataLoader over its own sample order (last file first) shuffled by its own generator with worker processes, tuple
batches without names, and its own loss. The adapter's calls (connect, dataset, watch, steps, backward,
optimizer_step) are all it takes for dbh to run, repeat and bisect it (scenarios/; README "Your own training").
"""
import json
import sys
from pathlib import Path
from typing import Any, Dict, List

sys.dont_write_bytecode = True  # nothing written into this folder

import dbh_adapter  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from folder import RegionFolder  # noqa: E402
from regions import RegionNet, objective, region_scores  # noqa: E402

HERE = Path(__file__).resolve().parent


class ConfigError(ValueError):
    pass


def compose(args: List[str]) -> Dict[str, Any]:
    """config.json with `section.key=value` arguments applied; a value takes its default's type."""
    with open(HERE / "config.json", encoding="utf-8") as f:
        cfg = json.load(f)
    for arg in args:
        key, sep, text = arg.partition("=")
        section, dot, name = key.partition(".")
        if not sep or not dot or section not in cfg or name not in cfg[section]:
            known = ", ".join(f"{s}.{k}" for s in cfg for k in cfg[s])
            raise ConfigError(f"unknown key {key!r} in {arg!r}: expected one of {known}")
        default = cfg[section][name]
        try:
            if isinstance(default, bool):
                value: Any = {"true": True, "false": False}[text.lower()]
            elif isinstance(default, int):
                value = int(text)
            elif isinstance(default, float):
                value = float(text)
            else:
                value = text
        except (KeyError, ValueError):
            raise ConfigError(f"{key}: expected a {type(default).__name__}, got {text!r}") from None
        cfg[section][name] = value
    return cfg


def seed_worker(worker_id: int) -> None:
    torch.manual_seed(torch.initial_seed() % 2**31 + worker_id)


def main(argv: List[str]) -> int:
    print_config = "--print-config" in argv
    try:
        cfg = compose([a for a in argv if a != "--print-config"])
    except ConfigError as e:
        print(f"train.py: {e}", file=sys.stderr)
        return 2
    if print_config:
        print(json.dumps(cfg, indent=2))
        return 0
    root = Path(cfg["dataset"]["root"])
    folder = RegionFolder(root if root.is_absolute() else HERE / root, cfg["dataset"]["side"])
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(cfg["run"]["threads"])
    with dbh_adapter.connect(config=cfg) as dbh:  # outside dbh: an inactive session, the same loop
        for _ in dbh.runs():  # once; under dbh, repeat.in_process times in this process
            fit(cfg, dbh, folder)
    return 0


def fit(cfg: Dict[str, Any], dbh: dbh_adapter.Session, folder: RegionFolder) -> None:
    run, data, opt = cfg["run"], cfg["dataset"], cfg["optim"]
    torch.manual_seed(run["seed"])
    train_set = dbh.dataset(folder, names=folder.files, synthetic=folder.synthetic)
    loader = DataLoader(train_set, batch_size=cfg["loader"]["per_step"], shuffle=True, drop_last=False,
                        generator=torch.Generator().manual_seed(run["seed"]), num_workers=data["workers"],
                        worker_init_fn=seed_worker)
    model = RegionNet(cfg["arch"]["width"], cfg["arch"]["depth"])
    optimizer = torch.optim.SGD(model.parameters(), lr=opt["step_size"], momentum=opt["momentum"])
    dbh.watch(model, optimizer)
    weights, check = cfg["objective"], cfg["check"]
    # Its own validation: the first check.images files, scored every check.every updates and after the last.
    held = [folder[i] for i in range(min(check["images"], len(folder)))] if check["every"] > 0 else []
    for step, (pixels, region, _) in dbh.steps(loader, max_steps=run["updates"]):
        loss = objective(model(pixels), region, weights["edge_weight"], weights["dice_weight"])
        dbh.backward(loss)
        if opt["clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), opt["clip"])
        dbh.optimizer_step(samples=int(pixels.shape[0]))
        print(f"update {step} objective {loss.item():.5f}", file=sys.stderr, flush=True)
        if held and ((step + 1) % check["every"] == 0 or step + 1 == run["updates"]):
            scores = region_scores(model, torch.stack([p for p, _, _ in held]), torch.stack([r for _, r, _ in held]),
                                   check["cutoff"])
            dbh.report_validation({f"val/{name}": value for name, value in scores.items()})
            print(f"check after {step + 1}: " + ", ".join(f"{k} {v:.3f}" for k, v in scores.items()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
