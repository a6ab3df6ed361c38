"""A small text-region segmenter: where is there text in an image?

RegionNet maps an image [N, 3, S, S] to region logits [N, 1, S, S]:

    stem     3x3 conv + ReLU at full resolution (no normalisation layers anywhere)
    body.k   `depth` stages, each a stride-2 3x3 conv + ReLU (width doubles)
    bridge   every stage resized to the stem's resolution, concatenated, mixed by a 1x1 conv (`bridge.mix`)
    readout  3x3 conv + ReLU, then a 1x1 conv to one logit per pixel (`readout.logit`)

The objective is its own: edge_weight * BCE on the logits + dice_weight * (1 - soft Dice) of the sigmoid.
"""
from typing import Dict, List

import torch
from torch import nn
from torch.nn import functional as F


def conv_block(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=stride, padding=1), nn.ReLU(inplace=True))


class Bridge(nn.Module):
    def __init__(self, widths: List[int], out: int):
        super().__init__()
        self.mix = nn.Conv2d(sum(widths), out, 1)

    def forward(self, levels: List[torch.Tensor]) -> torch.Tensor:
        size = levels[0].shape[-2:]
        up = [levels[0]] + [F.interpolate(x, size=size, mode="bilinear", align_corners=False) for x in levels[1:]]
        return torch.relu(self.mix(torch.cat(up, dim=1)))


class Readout(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.refine = nn.Conv2d(width, width, 3, padding=1)
        self.logit = nn.Conv2d(width, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logit(torch.relu(self.refine(x)))


class RegionNet(nn.Module):
    def __init__(self, width: int = 8, depth: int = 3):
        super().__init__()
        if width < 1 or depth < 1:
            raise ValueError(f"arch: expected width and depth of at least 1, got {width} and {depth}")
        self.stem = conv_block(3, width)
        widths = [width * 2 ** (k + 1) for k in range(depth)]
        self.body = nn.ModuleList(conv_block(cin, cout, stride=2) for cin, cout in zip([width] + widths, widths))
        self.bridge = Bridge([width] + widths, width)
        self.readout = Readout(width)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        x = self.stem(pixels)
        levels = [x]
        for stage in self.body:
            x = stage(x)
            levels.append(x)
        return self.readout(self.bridge(levels))


@torch.no_grad()
def region_scores(model: nn.Module, pixels: torch.Tensor, region: torch.Tensor, cutoff: float) -> Dict[str, float]:
    """Pixel precision, recall and F1 of the regions predicted above `cutoff` (0 where nothing is predicted)."""
    was_training = model.training
    model.eval()
    predicted = (torch.sigmoid(model(pixels)) > cutoff).float()
    model.train(was_training)
    hit = float((predicted * region).sum())
    precision = hit / float(predicted.sum()) if float(predicted.sum()) > 0 else 0.0
    recall = hit / float(region.sum()) if float(region.sum()) > 0 else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def objective(logits: torch.Tensor, region: torch.Tensor, edge_weight: float, dice_weight: float) -> torch.Tensor:
    """edge_weight * BCE(logits, region) + dice_weight * (1 - soft Dice(sigmoid(logits), region))."""
    bce = F.binary_cross_entropy_with_logits(logits, region)
    prob = torch.sigmoid(logits)
    inter = (prob * region).sum(dim=(1, 2, 3))
    dice = (2 * inter + 1) / (prob.sum(dim=(1, 2, 3)) + region.sum(dim=(1, 2, 3)) + 1)
    return edge_weight * bce + dice_weight * (1 - dice.mean())
