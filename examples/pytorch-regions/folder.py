"""The training images and their text regions, read from a folder.

A folder holds `images/` and `annotations.json` (UFO: {"images": {file: {"words": {id: {"points": [[x, y], ...]}}}}}).
Samples are ordered by file name, last first (this training's own order), and each one is
(pixels [3, S, S] in [-1, 1], region [1, S, S] in {0, 1}, index): a tuple, no names, no dict.
"""
import json
from pathlib import Path
from typing import List, Tuple

import torch
from PIL import Image, ImageDraw
from torch.utils.data import Dataset


class RegionFolder(Dataset):
    def __init__(self, root: Path, side: int):
        self.root = Path(root)
        self.side = side
        with open(self.root / "annotations.json", encoding="utf-8") as f:
            images = json.load(f)["images"]
        self.files: List[str] = sorted(images, reverse=True)
        self.polygons = [[w["points"] for w in images[name].get("words", {}).values()] for name in self.files]

    def __len__(self) -> int:
        return len(self.files)

    def synthetic(self, index: int) -> Tuple[torch.Tensor, torch.Tensor, int]:
        """An easy sample of the same structure, made from the index: bright rectangles on a dark, noisy
        background and their region (what dbh's synthetic-data rungs train on: dbh.dataset(..., synthetic=))."""
        g = torch.Generator().manual_seed(1000 + index)
        s = self.side
        pixels = -0.8 + 0.1 * torch.randn(3, s, s, generator=g)
        region = torch.zeros(1, s, s)
        for _ in range(int(torch.randint(1, 4, (1,), generator=g))):
            h, w = (int(v) for v in torch.randint(s // 8, s // 3, (2,), generator=g))
            y, x = int(torch.randint(0, s - h, (1,), generator=g)), int(torch.randint(0, s - w, (1,), generator=g))
            pixels[:, y:y + h, x:x + w] = 0.8
            region[:, y:y + h, x:x + w] = 1
        return pixels, region, index

    def __getitem__(self, index: int) -> Tuple[torch.Tensor, torch.Tensor, int]:
        with Image.open(self.root / "images" / self.files[index]) as im:
            im.load()  # a truncated or corrupt file raises here
            rgb = im.convert("RGB")
        w, h = rgb.size
        rgb = rgb.resize((self.side, self.side), Image.BILINEAR)
        mask = Image.new("L", (self.side, self.side), 0)
        draw = ImageDraw.Draw(mask)
        for poly in self.polygons[index]:
            draw.polygon([(x * self.side / w, y * self.side / h) for x, y in poly], fill=1)
        pixels = torch.frombuffer(bytearray(rgb.tobytes()), dtype=torch.uint8).view(self.side, self.side, 3)
        pixels = pixels.permute(2, 0, 1).float() / 127.5 - 1
        region = torch.frombuffer(bytearray(mask.tobytes()), dtype=torch.uint8).view(1, self.side, self.side).float()
        return pixels, region, index
