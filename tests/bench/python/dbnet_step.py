"""One DBNet training step in PyTorch eager, for comparison with BM_StepPlain.

Same model and step as tests/bench/harness_bench.cc: ResNet-18 (BasicBlock
stack as model/backbone/resnet.cc), DB FPN (256 inner / 64 per level, fusion
3x3 Conv+BN+ReLU, model/neck/fpn.cc), DB head (model/head/db_head.cc, k = 50),
DB loss (model/loss/db_loss.cc: 5 * balanced BCE with logits + 3:1 OHEM,
10 * masked L1, 1 * Dice), SGD lr 0.007 momentum 0.9 wd 1e-4, batch 2, 128x128,
2 intra-op threads. Synthetic input like synthetic_boxes_batch: a noisy image
with 1-3 bright rectangles per sample, their shrunk kernels as the binary map,
full shrink masks, a threshold band. Prints the median of 20 steps after 3
warm-ups. Run: .venv/bin/python tests/bench/python/dbnet_step.py (no numpy).

--serve DUMP [DEVICE [nchw|channels_last|users]]: the side-by-side mode of BM_StepPythonEager (harness_bench.cc);
  users: NCHW with PyTorch's default thread count.
Loads the C++ model's initial weights and buffers and its input batch from DUMP
(parameter names are LibTorch's: encoder.layer1.0.conv1.weight, ...), prints
"ready N", then answers each "step" line on stdin with "<ms> <loss>".
"""
import os
import platform
import resource
import statistics
import struct
import sys
import time

import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402
import torch.nn as nn
import torch.nn.functional as F

BATCH, SIZE, THREADS, WARMUP, STEPS = 2, 128, 2, 3, 20


def conv(cin, cout, k, stride=1):
    return nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False)


class BasicBlock(nn.Module):
    def __init__(self, cin, planes, stride):
        super().__init__()
        self.conv1 = conv(cin, planes, 3, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = conv(planes, planes, 3)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or cin != planes:
            self.downsample = nn.Sequential(conv(cin, planes, 1, stride), nn.BatchNorm2d(planes))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (self.downsample(x) if self.downsample is not None else x))


class ResNet18(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        cin, layers = 64, []
        for i, planes in enumerate((64, 128, 256, 512)):
            stride = 1 if i == 0 else 2
            blocks = [BasicBlock(cin, planes, stride), BasicBlock(planes, planes, 1)]
            cin = planes
            layers.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        y = F.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        c2 = self.layer1(y)
        c3 = self.layer2(c2)
        c4 = self.layer3(c3)
        c5 = self.layer4(c4)
        return c2, c3, c4, c5


def resize_nearest(x, size):
    return x if tuple(x.shape[2:]) == tuple(size) else F.interpolate(x, size=size, mode="nearest")


class ConvBnRelu(nn.Module):
    def __init__(self, cin, cout, k):
        super().__init__()
        self.conv = conv(cin, cout, k)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


class Fpn(nn.Module):
    def __init__(self, cins=(64, 128, 256, 512), inner=256, level=64):
        super().__init__()
        self.lateral2, self.lateral3, self.lateral4, self.lateral5 = (conv(c, inner, 1) for c in cins)
        self.smooth2, self.smooth3, self.smooth4, self.smooth5 = (conv(inner, level, 3) for _ in range(4))
        self.fusion = ConvBnRelu(4 * level, 4 * level, 3)

    def forward(self, f):
        c2, c3, c4, c5 = f
        l5, l4, l3, l2 = self.lateral5(c5), self.lateral4(c4), self.lateral3(c3), self.lateral2(c2)
        m4 = resize_nearest(l5, c4.shape[2:]) + l4
        m3 = resize_nearest(m4, c3.shape[2:]) + l3
        m2 = resize_nearest(m3, c2.shape[2:]) + l2
        size = m2.shape[2:]
        p5, p4, p3, p2 = self.smooth5(l5), self.smooth4(m4), self.smooth3(m3), self.smooth2(m2)
        fused = torch.cat([resize_nearest(p5, size), resize_nearest(p4, size),
                           resize_nearest(p3, size), p2], dim=1)
        return self.fusion(fused)


class DbBranch(nn.Module):
    def __init__(self, cin):
        super().__init__()
        c = cin // 4
        self.conv = nn.Conv2d(cin, c, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c)
        self.up1 = nn.ConvTranspose2d(c, c, 2, stride=2)
        self.up1_bn = nn.BatchNorm2d(c)
        self.up2 = nn.ConvTranspose2d(c, 1, 2, stride=2)

    def forward(self, x):
        y1 = torch.relu(self.bn(self.conv(x)))
        y2 = torch.relu(self.up1_bn(self.up1(y1)))
        return self.up2(y2)


class DbHead(nn.Module):
    def __init__(self, cin):
        super().__init__()
        self.prob, self.thresh = DbBranch(cin), DbBranch(cin)


class DbNet(nn.Module):
    def __init__(self, k=50.0):
        super().__init__()
        self.encoder, self.decoder, self.head = ResNet18(), Fpn(), DbHead(256)
        self.k = k

    def forward(self, x):
        y = self.decoder(self.encoder(x))
        prob_logits = self.head.prob(y)
        probability = torch.sigmoid(prob_logits)
        threshold = torch.sigmoid(self.head.thresh(y))
        binary = torch.sigmoid((probability - threshold) * self.k)
        return prob_logits, threshold, binary


def balanced_bce(logits, gt, mask, negative_ratio=3.0, fallback=100, eps=1e-6):
    valid = mask > 0.5
    is_pos = (gt > 0.5) & valid
    is_neg = (gt <= 0.5) & valid
    target = is_pos.float()
    loss = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
    counts = torch.stack([is_pos.sum(), is_neg.sum()]).cpu()
    n_pos, n_neg_avail = int(counts[0]), int(counts[1])
    n_neg = min(n_neg_avail, int(n_pos * negative_ratio)) if n_pos > 0 else min(n_neg_avail, fallback)
    pos_sum = (loss * target).sum()
    neg_sum = torch.zeros((), dtype=loss.dtype, device=loss.device)
    if n_neg > 0:
        neg_sum = (loss * is_neg.float()).flatten().topk(n_neg, 0, largest=True, sorted=False)[0].sum()
    return (pos_sum + neg_sum) / (n_pos + n_neg + eps)


def db_loss(out, t, eps=1e-6):
    prob_logits, threshold, binary = out
    bce = balanced_bce(prob_logits, t["gt_shrink"], t["gt_shrink_mask"])
    l1 = ((threshold - t["gt_thresh"]).abs() * t["gt_thresh_mask"]).sum() / (t["gt_thresh_mask"].sum() + eps)
    m = t["gt_shrink_mask"]
    inter = (binary * t["gt_shrink"] * m).sum()
    union = (binary * m).sum() + (t["gt_shrink"] * m).sum() + eps
    dice = 1.0 - 2.0 * inter / union
    return 5.0 * bce + 10.0 * l1 + 1.0 * dice


def synthetic_batch(n, h, w, seed=1):
    g = torch.Generator().manual_seed(seed)
    image = 0.2 * torch.randn(n, 3, h, w, generator=g) - 1.0
    gt_shrink = torch.zeros(n, 1, h, w)
    gt_thresh_mask = torch.zeros(n, 1, h, w)
    gt_thresh = torch.full((n, 1, h, w), 0.3)

    def draw(lo, hi):
        return lo + int(torch.randint(hi - lo + 1, (1,), generator=g))

    for i in range(n):
        for _ in range(draw(1, 3)):
            bw, bh = draw(w // 4, w // 2), draw(h // 8, h // 4)
            x0, y0 = draw(0, w - bw - 1), draw(0, h - bh - 1)
            x1, y1 = x0 + bw, y0 + bh
            image[i, :, y0:y1, x0:x1] += 2.0
            di = max(1, int(bw * bh * (1 - 0.16) / (2 * (bw + bh))))
            gt_shrink[i, 0, min(y0 + di, y1 - 1):max(y1 - di, y0 + di + 1),
                      min(x0 + di, x1 - 1):max(x1 - di, x0 + di + 1)] = 1.0
            gt_thresh_mask[i, 0, max(0, y0 - di):min(h, y1 + di), max(0, x0 - di):min(w, x1 + di)] = 1.0
            gt_thresh[i, 0, max(0, y0 - di):min(h, y1 + di), max(0, x0 - di):min(w, x1 + di)] = 0.7
    return image, dict(gt_shrink=gt_shrink, gt_shrink_mask=torch.ones(n, 1, h, w),
                       gt_thresh=gt_thresh, gt_thresh_mask=gt_thresh_mask)


def read_dump(path):
    """Named tensors written by harness_bench.cc's dump_tensors."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:5] != b"DBHT1":
        sys.exit(f"{path}: expected a DBHT1 tensor dump")
    (count,), off = struct.unpack_from("<I", data, 5), 9
    out = {}
    for _ in range(count):
        (n,) = struct.unpack_from("<I", data, off)
        name = data[off + 4:off + 4 + n].decode()
        off += 4 + n
        (ndim,) = struct.unpack_from("<I", data, off)
        dims = struct.unpack_from(f"<{ndim}q", data, off + 4)
        off += 4 + 8 * ndim
        dtype = (torch.float32, torch.int64)[data[off]]
        off += 1
        numel = 1
        for d in dims:
            numel *= d
        nbytes = numel * (4 if dtype == torch.float32 else 8)
        out[name] = torch.frombuffer(bytearray(data[off:off + nbytes]), dtype=dtype).reshape(dims).clone()
        off += nbytes
    return out


def serve(path, device="cpu", layout="nchw"):
    # "users": NCHW with PyTorch's own thread count, as a user's script runs.
    if layout != "users":
        torch.set_num_threads(THREADS)
    tensors = read_dump(path)
    model = DbNet().train()
    state = model.state_dict()
    missing = sorted(set(state) - set(tensors))
    unexpected = sorted(k for k in tensors if k not in state and not k.startswith(("input.", "target.")))
    if missing or unexpected:
        sys.exit(f"{path}: names differ from the C++ model: missing {missing[:8]}, unexpected {unexpected[:8]}")
    for k, v in state.items():
        if tuple(v.shape) != tuple(tensors[k].shape):
            sys.exit(f"{path}: {k}: expected shape {tuple(v.shape)}, got {tuple(tensors[k].shape)}")
    model.load_state_dict({k: tensors[k] for k in state})
    model.to(device)
    tensors = {k: v.to(device) for k, v in tensors.items()}
    if layout == "channels_last":
        model.to(memory_format=torch.channels_last)
        tensors["input.image"] = tensors["input.image"].contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.007, momentum=0.9, weight_decay=1e-4)
    image = tensors["input.image"]
    targets = {k[len("target."):]: v for k, v in tensors.items() if k.startswith("target.")}
    trace_dir = os.environ.get("DBH_BENCH_TRACE")
    traced = False
    print(f"ready {len(state)}", flush=True)
    steps = 0
    for line in sys.stdin:
        if line.strip() != "step":
            continue
        t0 = time.perf_counter()
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        # DBH_BENCH_TRACE=DIR: the third step (after the two warm-ups) as an op-level trace.
        steps += 1
        prof = None
        if trace_dir and not traced and steps == 3:
            prof = torch.autograd.profiler.profile()
            prof.__enter__()
        opt.zero_grad(set_to_none=True)
        loss = db_loss(model(image), targets)
        loss.backward()
        opt.step()
        value = float(loss.detach())
        if prof is not None:
            prof.__exit__(None, None, None)
            traced = True
            prof.export_chrome_trace(os.path.join(trace_dir, f"py_{layout}_{image.shape[-1]}.json"))
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
        print(f"{(time.perf_counter() - t0) * 1e3:.3f} {value:.9g} {faults}", flush=True)


def main():
    if len(sys.argv) in (3, 4, 5) and sys.argv[1] == "--serve":
        serve(*sys.argv[2:])
        return
    torch.manual_seed(0)
    torch.set_num_threads(THREADS)
    model = DbNet().train()
    opt = torch.optim.SGD(model.parameters(), lr=0.007, momentum=0.9, weight_decay=1e-4)
    image, targets = synthetic_batch(BATCH, SIZE, SIZE)

    def step():
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = db_loss(model(image), targets)
        loss.backward()
        opt.step()
        value = float(loss.detach())
        return time.perf_counter() - t0, value

    for _ in range(WARMUP):
        step()
    times, loss = [], 0.0
    for _ in range(STEPS):
        dt, loss = step()
        times.append(dt)
    med = statistics.median(times)
    print(f"torch {torch.__version__}, python {platform.python_version()}, threads {torch.get_num_threads()}, "
          f"{platform.processor() or platform.machine()}")
    print(f"config: ResNet-18 + FPN, batch {BATCH}, {SIZE}x{SIZE}, SGD, {WARMUP} warm-ups, {STEPS} timed steps")
    print(f"steps_ms: {' '.join(f'{t * 1e3:.1f}' for t in times)}")
    print(f"min_ms: {min(times) * 1e3:.2f}")
    print(f"median_ms: {med * 1e3:.2f}")
    print(f"images_per_s: {BATCH / med:.2f}")
    print(f"last_loss: {loss:.4f}")


if __name__ == "__main__":
    main()
