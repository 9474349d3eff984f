"""What every mode of bench/ddp_resnet50.py trains: torchvision's model (weights=None) from a
fixed seed, so that every mode and every rank starts from the same weights, on a synthetic
data set (random uint8 images and labels from a fixed seed, the same on every rank) that
DistributedSampler shards."""
from __future__ import annotations

# The models the bench offers (the smaller ones for quick tests).
MODELS = ("resnet18", "resnet34", "resnet50")
# Distinct batches per rank in the synthetic data set; the loader cycles through them.
# A few keep 224-pixel data of 8 ranks x 256 images within host memory.
BATCHES_PER_RANK = 4


def synthetic_data(world, args):
    """The data set every mode shares: BATCHES_PER_RANK batches per rank of uint8 images (as
    a decoder would produce them: a quarter of the host memory of fp32) and labels."""
    import torch
    from torch.utils.data import TensorDataset

    g = torch.Generator().manual_seed(args.seed)
    n = args.batch_size * world.size * BATCHES_PER_RANK
    images = torch.randint(0, 256, (n, 3, args.image_size, args.image_size), dtype=torch.uint8,
                           generator=g)
    labels = torch.randint(0, args.classes, (n,), generator=g)
    return TensorDataset(images, labels)


def synthetic_loader(world, args, data, sharded: bool):
    """An endless iterator of (images, labels) batches on the device: the epochs of `data`,
    sharded by DistributedSampler when `sharded`."""
    import torch
    from torch.utils.data import DataLoader, DistributedSampler

    if sharded:
        sampler = DistributedSampler(data, num_replicas=world.size, rank=world.rank,
                                     shuffle=True, seed=args.seed, drop_last=True)
        loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    else:
        sampler = None
        loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, drop_last=True,
                            generator=torch.Generator().manual_seed(args.seed))
    pin = world.device.type == "cuda"

    def batches():
        epoch = 0
        while True:
            if sampler is not None:
                sampler.set_epoch(epoch)
            for x, y in loader:
                if pin:
                    x, y = x.pin_memory(), y.pin_memory()
                x = x.to(world.device, non_blocking=True).float().div_(255.0)
                yield x, y.to(world.device, non_blocking=True)
            epoch += 1

    return batches()


def build_model(world, args, sync_bn: bool):
    import torch
    import torchvision

    torch.manual_seed(args.seed)  # the same initial weights in every mode and on every rank
    model = getattr(torchvision.models, args.model)(weights=None, num_classes=args.classes)
    if sync_bn:
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = model.to(world.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    return model, opt
