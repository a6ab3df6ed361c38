"""Dataset, DBNet label generation and the LightningDataModule.

A dataset is a folder with ``images/`` plus either ``annotations.json`` (UFO JSON) or ``icdar/gt_*.txt``
(ICDAR 2015).  Each item is resized to a square ``target_size`` (no augmentation, fully deterministic) and
carries the four DBNet label maps:

* ``gt``          1 inside the shrunk polygons G_s of legible words (shrink ratio r, offset D = A(1-r^2)/L)
* ``mask``        0 inside ignored words (``###`` / illegible / too small / unshrinkable), 1 elsewhere
* ``thresh_map``  0.3 .. 0.7, highest on the word outline, falling linearly to 0.3 at distance D
* ``thresh_mask`` 1 inside the dilated polygons G_d of legible words
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import lightning as L
import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
IMAGE_EXTENSIONS = {".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp"}


# --------------------------------------------------------------------------------------------------------------------
# Annotation readers
# --------------------------------------------------------------------------------------------------------------------
def read_ufo(root: Path) -> list[dict]:
    """UFO JSON: images in the JSON object's key order; ``illegibility: true`` marks a don't-care word."""
    with open(root / "annotations.json", encoding="utf-8-sig") as f:
        anno = json.load(f)
    samples = []
    for name, record in anno["images"].items():
        polygons, ignores = [], []
        for word in (record.get("words") or {}).values():
            points = word.get("points") or []
            if len(points) < 3:
                continue
            polygons.append(np.asarray(points, dtype=np.float64).reshape(-1, 2))
            ignores.append(bool(word.get("illegibility", False)) or word.get("transcription") == "###")
        samples.append({"id": name, "path": root / "images" / name, "polygons": polygons, "ignores": ignores})
    return samples


def _image_for_stem(images_dir: Path, stem: str) -> Path:
    candidates = sorted(p for p in images_dir.glob(stem + ".*") if p.suffix.lower() in IMAGE_EXTENSIONS)
    if len(candidates) != 1:
        raise FileNotFoundError(
            f"expected exactly one image named {stem}.<ext> in {images_dir}, found {[p.name for p in candidates]}")
    return candidates[0]


def read_icdar(root: Path) -> list[dict]:
    """ICDAR 2015: ``icdar/gt_<stem>.txt`` sorted by file name annotates ``images/<stem>.<ext>``."""
    samples = []
    for gt_file in sorted((root / "icdar").glob("gt_*.txt"), key=lambda p: p.name):
        image_path = _image_for_stem(root / "images", gt_file.stem[len("gt_"):])
        polygons, ignores = [], []
        text = gt_file.read_text(encoding="utf-8-sig")  # tolerates a BOM
        for line_no, line in enumerate(text.splitlines(), 1):  # tolerates CRLF
            line = line.strip().lstrip("\ufeff")
            if not line:
                continue
            parts = line.split(",", 8)
            if len(parts) < 8:
                raise ValueError(f"{gt_file}:{line_no}: expected x1,y1,...,x4,y4,transcription")
            try:
                coords = [float(v) for v in parts[:8]]
            except ValueError as e:
                raise ValueError(f"{gt_file}:{line_no}: {e}") from e
            transcription = parts[8] if len(parts) > 8 else ""
            polygons.append(np.asarray(coords, dtype=np.float64).reshape(4, 2))
            ignores.append(transcription == "###")
        samples.append({"id": image_path.name, "path": image_path, "polygons": polygons, "ignores": ignores})
    return samples


# --------------------------------------------------------------------------------------------------------------------
# Polygon geometry (no pyclipper / OpenCV: shoelace, edge offsets and rasterisation in numpy)
# --------------------------------------------------------------------------------------------------------------------
def signed_area(poly: np.ndarray) -> float:
    x, y = poly[:, 0], poly[:, 1]
    return 0.5 * float(np.sum(x * np.roll(y, -1) - np.roll(x, -1) * y))


def perimeter(poly: np.ndarray) -> float:
    return float(np.sum(np.linalg.norm(np.roll(poly, -1, axis=0) - poly, axis=1)))


def is_convex(poly: np.ndarray) -> bool:
    e = np.roll(poly, -1, axis=0) - poly
    cross = e[:, 0] * np.roll(e[:, 1], -1) - e[:, 1] * np.roll(e[:, 0], -1)
    cross = cross[np.abs(cross) > 1e-9]
    return bool(np.all(cross > 0) or np.all(cross < 0))


def offset_convex(poly: np.ndarray, distance: float) -> np.ndarray | None:
    """Move every edge of a convex polygon inward by ``distance`` and intersect neighbouring edges.

    Returns the shrunk polygon, or None when an edge collapses or flips (the offset is larger than the polygon).
    """
    sign = 1.0 if signed_area(poly) > 0 else -1.0
    a = poly
    e = np.roll(poly, -1, axis=0) - poly
    length = np.linalg.norm(e, axis=1)
    if np.any(length < 1e-9):
        return None
    d = e / length[:, None]
    inward = sign * np.stack([-d[:, 1], d[:, 0]], axis=1)
    p = a + distance * inward  # a point on each offset edge line, direction d
    out = np.empty_like(poly)
    n = len(poly)
    for i in range(n):
        j = i - 1  # the offset edge before vertex i
        denom = d[j, 0] * d[i, 1] - d[j, 1] * d[i, 0]
        if abs(denom) < 1e-12:  # collinear neighbours: the shifted vertex itself
            out[i] = p[i]
            continue
        diff = p[i] - p[j]
        t = (diff[0] * d[i, 1] - diff[1] * d[i, 0]) / denom
        out[i] = p[j] + t * d[j]
    new_e = np.roll(out, -1, axis=0) - out
    if np.any(np.sum(new_e * e, axis=1) <= 0) or signed_area(out) * sign <= 0:
        return None
    return out


def point_segment_distance(xs: np.ndarray, ys: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact distance from the points (xs, ys) to segment a-b; a zero-length edge is a point."""
    ab = b - a
    denom = float(ab @ ab)
    px, py = xs - a[0], ys - a[1]
    if denom < 1e-12:
        return np.hypot(px, py)
    t = np.clip((px * ab[0] + py * ab[1]) / denom, 0.0, 1.0)
    return np.hypot(px - t * ab[0], py - t * ab[1])


def boundary_distance(xs: np.ndarray, ys: np.ndarray, poly: np.ndarray) -> np.ndarray:
    dist = np.full(xs.shape, np.inf)
    for i in range(len(poly)):
        dist = np.minimum(dist, point_segment_distance(xs, ys, poly[i], poly[(i + 1) % len(poly)]))
    return dist


def inside(xs: np.ndarray, ys: np.ndarray, poly: np.ndarray) -> np.ndarray:
    """Even-odd point-in-polygon test."""
    result = np.zeros(xs.shape, dtype=bool)
    n = len(poly)
    for i in range(n):
        x1, y1 = poly[i]
        x2, y2 = poly[(i + 1) % n]
        crosses = (y1 > ys) != (y2 > ys)
        with np.errstate(divide="ignore", invalid="ignore"):
            x_at = x1 + (ys - y1) * (x2 - x1) / (y2 - y1)
        result ^= crosses & (xs < x_at)
    return result


def _grid(poly: np.ndarray, h: int, w: int, margin: float = 0.0):
    x0 = max(int(math.floor(poly[:, 0].min() - margin)), 0)
    x1 = min(int(math.ceil(poly[:, 0].max() + margin)), w - 1)
    y0 = max(int(math.floor(poly[:, 1].min() - margin)), 0)
    y1 = min(int(math.ceil(poly[:, 1].max() + margin)), h - 1)
    if x1 < x0 or y1 < y0:
        return None
    ys, xs = np.mgrid[y0:y1 + 1, x0:x1 + 1].astype(np.float64)
    return (slice(y0, y1 + 1), slice(x0, x1 + 1)), xs, ys


def fill_polygon(canvas: np.ndarray, poly: np.ndarray, value: float) -> int:
    """Fill the pixels (centres at integer coordinates) inside or on the outline of ``poly``; returns the count."""
    grid = _grid(poly, *canvas.shape)
    if grid is None:
        return 0
    window, xs, ys = grid
    region = inside(xs, ys, poly) | (boundary_distance(xs, ys, poly) <= 0.5)
    canvas[window][region] = value
    return int(region.sum())


def make_labels(polygons, ignores, size: int, shrink_ratio: float, min_text_size: float,
                thresh_min: float, thresh_max: float):
    """DBNet labels in the order of MhLiao/DB: shrink map (marks ignored words), then border map for the rest."""
    h = w = size
    gt = np.zeros((h, w), dtype=np.float32)
    mask = np.ones((h, w), dtype=np.float32)
    canvas = np.zeros((h, w), dtype=np.float64)
    thresh_mask = np.zeros((h, w), dtype=np.float32)
    kept = []
    for poly, ignore in zip(polygons, ignores):
        poly = poly.copy()
        poly[:, 0] = np.clip(poly[:, 0], 0, w - 1)
        poly[:, 1] = np.clip(poly[:, 1], 0, h - 1)
        area = signed_area(poly)
        extent = poly.max(axis=0) - poly.min(axis=0)
        if ignore or abs(area) < 1 or min(extent) < min_text_size:
            fill_polygon(mask, poly, 0.0)
            continue
        distance = abs(area) * (1 - shrink_ratio ** 2) / perimeter(poly)
        shrunk = offset_convex(poly, distance) if is_convex(poly) else None
        if shrunk is not None and fill_polygon(gt, shrunk, 1.0) > 0:
            kept.append((poly, distance))
            continue
        # Non-convex polygon or collapsed edge offset: the exact inward offset is the set of interior points at
        # least `distance` away from the outline.
        grid = _grid(poly, h, w)
        region = None
        if grid is not None:
            window, xs, ys = grid
            region = inside(xs, ys, poly) & (boundary_distance(xs, ys, poly) >= distance)
        if region is None or not region.any():  # nothing left after shrinking: a don't-care region
            fill_polygon(mask, poly, 0.0)
            continue
        gt[window][region] = 1.0
        kept.append((poly, distance))

    for poly, distance in kept:
        grid = _grid(poly, h, w, margin=distance)
        if grid is None:
            continue
        window, xs, ys = grid
        dist = boundary_distance(xs, ys, poly)
        thresh_mask[window][inside(xs, ys, poly) | (dist <= distance)] = 1.0  # the dilated polygon G_d
        canvas[window] = np.maximum(canvas[window], 1.0 - np.clip(dist / distance, 0.0, 1.0))
    thresh_map = canvas * (thresh_max - thresh_min) + thresh_min
    return gt, mask, thresh_map.astype(np.float32), thresh_mask


# --------------------------------------------------------------------------------------------------------------------
# Dataset
# --------------------------------------------------------------------------------------------------------------------
class TextDetectionDataset(Dataset):
    def __init__(self, root: str | Path, target_size: int = 128, fmt: str = "auto", shrink_ratio: float = 0.4,
                 min_text_size: float = 4, thresh_min: float = 0.3, thresh_max: float = 0.7):
        self.root = Path(root)
        if target_size % 32 != 0:
            raise ValueError(f"preprocessing.target_size must be a multiple of 32, got {target_size}")
        if fmt == "auto":
            fmt = "ufo" if (self.root / "annotations.json").is_file() else "icdar"
        if fmt == "ufo":
            self.samples = read_ufo(self.root)
        elif fmt == "icdar":
            self.samples = read_icdar(self.root)
        else:
            raise ValueError(f"unknown dataset format {fmt!r} (auto, ufo or icdar)")
        if not self.samples:
            raise ValueError(f"no annotated images in {self.root}")
        self.size = target_size
        self.shrink_ratio = shrink_ratio
        self.min_text_size = min_text_size
        self.thresh_min, self.thresh_max = thresh_min, thresh_max

    def __len__(self) -> int:
        return len(self.samples)

    def load_image(self, path: Path) -> Image.Image:
        try:
            with Image.open(path) as image:
                image.load()
                return image.convert("RGB")
        except Exception as e:  # re-raised with the file name, never swallowed
            raise RuntimeError(f"cannot decode image {path}: {e}") from e

    def __getitem__(self, index: int) -> dict:
        sample = self.samples[index]
        image = self.load_image(sample["path"])
        w, h = image.size
        image = image.resize((self.size, self.size), Image.BILINEAR)
        scale = np.array([self.size / w, self.size / h])
        polygons = [p * scale for p in sample["polygons"]]
        gt, mask, thresh_map, thresh_mask = make_labels(
            polygons, sample["ignores"], self.size, self.shrink_ratio, self.min_text_size,
            self.thresh_min, self.thresh_max)
        pixels = (np.asarray(image, dtype=np.float32) / 255.0 - IMAGENET_MEAN) / IMAGENET_STD
        return {
            "image": torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1))),
            "gt": torch.from_numpy(gt)[None],
            "mask": torch.from_numpy(mask)[None],
            "thresh_map": torch.from_numpy(thresh_map)[None],
            "thresh_mask": torch.from_numpy(thresh_mask)[None],
            "id": sample["id"],
        }


# --------------------------------------------------------------------------------------------------------------------
# DataModule
# --------------------------------------------------------------------------------------------------------------------
def resolve_dataset_path(path: str) -> Path:
    """A relative path is relative to the folder of this project, not to the working directory."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else (Path(__file__).resolve().parent / p)


class DBNetDataModule(L.LightningDataModule):
    def __init__(self, cfg, dbh):
        super().__init__()
        self.cfg = cfg
        self.dbh = dbh
        self.train_set = None

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        data, pre = self.cfg.datasets.train, self.cfg.preprocessing
        train_set = TextDetectionDataset(
            resolve_dataset_path(data.path), target_size=pre.target_size, fmt=data.get("format", "auto"),
            shrink_ratio=pre.shrink_ratio, min_text_size=pre.min_text_size,
            thresh_min=pre.thresh_min, thresh_max=pre.thresh_max)
        # Each read reported by its file name (dbh.dataset's `names`): `bisect data` names the sample.
        train_set = self.dbh.dataset(train_set, names=[str(s["id"]) for s in train_set.samples])
        self.train_set = train_set

    def train_dataloader(self) -> DataLoader:
        loader = self.cfg.dataloaders.train_dataloader
        return DataLoader(
            self.train_set,
            batch_size=loader.batch_size,
            num_workers=loader.num_workers,
            shuffle=loader.shuffle,
            generator=torch.Generator().manual_seed(int(self.cfg.seed)),
            persistent_workers=False,
        )
