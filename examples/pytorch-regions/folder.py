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
