"""A small DBNet (Liao et al., AAAI 2020) as a LightningModule: ResNet-like encoder, FPN decoder, DB head, DB loss."""
from __future__ import annotations

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn

# Encoder widths of the four stages (strides 4, 8, 16, 32) and BasicBlocks per stage.
ENCODERS = {
    "tiny": {"channels": (16, 32, 64, 128), "blocks": (1, 1, 1, 1)},
    "small": {"channels": (32, 64, 128, 256), "blocks": (2, 2, 2, 2)},
}


class BasicBlock(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.downsample = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride, bias=False), nn.BatchNorm2d(out_ch))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + identity)


class Encoder(nn.Module):
    """ResNet-like: 3x3/2 stem + 3x3/2 max-pool, then four stages C2..C5 at strides 4, 8, 16, 32."""

    def __init__(self, model_name: str = "tiny"):
        super().__init__()
        if model_name not in ENCODERS:
            raise ValueError(f"model.encoder.model_name must be one of {sorted(ENCODERS)}, got {model_name!r}")
        spec = ENCODERS[model_name]
        channels, blocks = spec["channels"], spec["blocks"]
        self.out_channels = channels
        self.stem = nn.Sequential(
            nn.Conv2d(3, channels[0], 3, 2, 1, bias=False), nn.BatchNorm2d(channels[0]), nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1))
        in_ch = channels[0]
        for i, (ch, n) in enumerate(zip(channels, blocks)):
            stride = 1 if i == 0 else 2
            layers = [BasicBlock(in_ch, ch, stride)] + [BasicBlock(ch, ch) for _ in range(n - 1)]
            setattr(self, f"layer{i + 1}", nn.Sequential(*layers))
            in_ch = ch

    def forward(self, x):
        x = self.stem(x)
        c2 = self.layer1(x)
        c3 = self.layer2(c2)
        c4 = self.layer3(c3)
        c5 = self.layer4(c4)
        return [c2, c3, c4, c5]


class FPNDecoder(nn.Module):
    """DBNet FPN: 1x1 laterals, top-down nearest upsample + add, 3x3 smoothing to inner/4, upsample every level to
    1/4, concatenate [P5, P4, P3, P2], then ``fusion`` (3x3 conv + BN + ReLU) produces the fused features."""

    def __init__(self, in_channels, inner_channels: int = 64):
        super().__init__()
        out_ch = inner_channels // 4
        self.lateral = nn.ModuleList(nn.Conv2d(c, inner_channels, 1, bias=False) for c in in_channels)
        self.smooth = nn.ModuleList(nn.Conv2d(inner_channels, out_ch, 3, padding=1, bias=False) for _ in in_channels)
        self.fusion = nn.Sequential(
            nn.Conv2d(out_ch * len(in_channels), inner_channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(inner_channels), nn.ReLU(inplace=True))
        self.out_channels = inner_channels

    def forward(self, features):
        laterals = [conv(f) for conv, f in zip(self.lateral, features)]
        for i in range(len(laterals) - 1, 0, -1):  # top-down: M_i = up(M_{i+1}) + L_i
            laterals[i - 1] = laterals[i - 1] + F.interpolate(laterals[i], size=laterals[i - 1].shape[-2:],
                                                              mode="nearest")
        size = laterals[0].shape[-2:]
        outs = [F.interpolate(conv(m), size=size, mode="nearest") if i else conv(m)
                for i, (conv, m) in enumerate(zip(self.smooth, laterals))]
        return self.fusion(torch.cat(outs[::-1], dim=1))  # [P5, P4, P3, P2]


def _branch(in_ch: int) -> nn.Sequential:
    c = in_ch // 4
    return nn.Sequential(
        nn.Conv2d(in_ch, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(inplace=True),
        nn.ConvTranspose2d(c, c, 2, 2), nn.BatchNorm2d(c), nn.ReLU(inplace=True),
        nn.ConvTranspose2d(c, 1, 2, 2), nn.Sigmoid())


class DBHead(nn.Module):
    """``binarize`` -> probability map P, ``thresh`` -> threshold map T, both at the input resolution."""

    def __init__(self, in_ch: int, k: float = 50):
        super().__init__()
        self.k = k
        self.binarize = _branch(in_ch)
        self.thresh = _branch(in_ch)

    def forward(self, x, size=None):
        prob = self.binarize(x)
        thresh = self.thresh(x)
        if size is not None and prob.shape[-2:] != size:
            prob = F.interpolate(prob, size=size, mode="bilinear", align_corners=False)
            thresh = F.interpolate(thresh, size=size, mode="bilinear", align_corners=False)
        # Approximate binary map 1 / (1 + exp(-k (P - T))), written as the (numerically safe) sigmoid.
        binary = torch.sigmoid(self.k * (prob - thresh))
        return {"prob": prob, "thresh": thresh, "binary": binary}


def init_weights(module: nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
            nn.init.kaiming_normal_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.constant_(m.bias, 1e-4)


# --------------------------------------------------------------------------------------------------------------------
# Losses (MhLiao/DB: balanced BCE with OHEM on P, masked L1 on T, Dice on the binary map)
# --------------------------------------------------------------------------------------------------------------------
def bce_on_probabilities(pred, gt):
    """Per-pixel BCE on probabilities, log clamped like F.binary_cross_entropy; unlike it, a NaN prediction gives a
    NaN loss (that a NaN monitor can see) instead of a range-check RuntimeError."""
    tiny = torch.finfo(pred.dtype).tiny
    return -(gt * torch.log(pred.clamp(min=tiny)) + (1 - gt) * torch.log((1 - pred).clamp(min=tiny)))


def balanced_bce(pred, gt, mask, negative_ratio: float = 3.0, fallback_negatives: int = 0, eps: float = 1e-6):
    """Over the whole batch: positives + the n_neg = min(#neg, ratio * #pos) hardest negatives. A batch without any
    positive keeps ``fallback_negatives`` hardest negatives (0, as in MhLiao/DB: such a batch gives no gradient)."""
    positive = (gt * mask) > 0.5
    negative = ((1 - gt) * mask) > 0.5
    n_pos = int(positive.sum())
    n_neg = min(int(negative.sum()), int(n_pos * negative_ratio) if n_pos > 0 else int(fallback_negatives))
    loss = bce_on_probabilities(pred, gt)
    pos_loss = (loss * positive).sum()
    neg_loss = torch.topk((loss * negative).flatten(), n_neg).values.sum() if n_neg > 0 else loss.sum() * 0
    return (pos_loss + neg_loss) / (n_pos + n_neg + eps)


def masked_l1(pred, gt, mask):
    denom = mask.sum()
    return (torch.abs(pred - gt) * mask).sum() / (denom + 1e-6)


def dice_loss(pred, gt, mask, eps: float = 1e-6):
    intersection = (pred * gt * mask).sum()
    union = (pred * mask).sum() + (gt * mask).sum() + eps
    return 1 - 2.0 * intersection / union


class DBNetLite(L.LightningModule):
    def __init__(self, model_cfg: dict):
        super().__init__()
        self.save_hyperparameters({"model": model_cfg})
        self.model_cfg = model_cfg
        self.encoder = Encoder(model_cfg["encoder"]["model_name"])
        self.decoder = FPNDecoder(self.encoder.out_channels, model_cfg["decoder"]["inner_channels"])
        self.head = DBHead(self.decoder.out_channels, k=model_cfg["head"]["k"])
        init_weights(self)

    def forward(self, image):
        return self.head(self.decoder(self.encoder(image)), size=image.shape[-2:])

    def compute_loss(self, out, batch):
        cfg = self.model_cfg["loss"]
        out = {k: v.float() for k, v in out.items()}
        with torch.autocast(device_type=out["prob"].device.type, enabled=False):  # losses in float32, outside autocast
            bce = balanced_bce(out["prob"], batch["gt"], batch["mask"], cfg["negative_ratio"],
                               cfg.get("fallback_negatives", 0))
            l1 = masked_l1(out["thresh"], batch["thresh_map"], batch["thresh_mask"])
            dice = dice_loss(out["binary"], batch["gt"], batch["mask"], cfg["eps"])
        # Paper notation: L = L_s + alpha * L_b + beta * L_t (L_b is the Dice loss on the binary map, as in the
        # released code; bce_scale is 1 here, 5 in MhLiao/DB's configs).
        total = cfg["bce_scale"] * bce + cfg["alpha"] * dice + cfg["beta"] * l1
        return total, {"loss_bce": bce, "loss_dice": dice, "loss_l1": l1}

    def training_step(self, batch, batch_idx):
        out = self(batch["image"])
        loss, parts = self.compute_loss(out, batch)
        batch_size = batch["image"].shape[0]
        self.log("train/loss", loss, batch_size=batch_size)
        for name, value in parts.items():
            self.log(f"train/{name}", value, batch_size=batch_size)
        return {"loss": loss, **{k: v.detach() for k, v in parts.items()}}

    def configure_optimizers(self):
        opt_cfg = self.model_cfg["optimizer"]
        optimizer = torch.optim.SGD(self.parameters(), lr=opt_cfg["lr"], momentum=opt_cfg["momentum"],
                                    weight_decay=opt_cfg["weight_decay"])
        total = max(int(self.trainer.estimated_stepping_batches), 1)
        power = opt_cfg.get("poly_power", 0.9)
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: max(1.0 - step / total, 0.0) ** power)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1}}
