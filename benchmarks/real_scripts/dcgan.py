"""A DCGAN-style pair (the published example's generator of transposed convolutions and
discriminator of strided convolutions, batch norm, BCE losses, two Adam optimizers) at 32×32
with narrower layers and a batch of 32 so that a CPU step takes at least 10 milliseconds (the
least the overhead target covers; at 16, with glibc's heap kept as the benchmark runs it, its
steps took 8.0 ms in one of the benchmark's runs); synthetic images served by a DataLoader with one
worker process (the example uses workers; they restart every epoch), 25 batches an epoch."""

from __future__ import annotations

import torch
from _common import Watch, arguments
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

NZ, NGF, NDF, NC = 64, 16, 16, 3


def generator() -> nn.Module:
    return nn.Sequential(
        nn.ConvTranspose2d(NZ, NGF * 4, 4, 1, 0, bias=False), nn.BatchNorm2d(NGF * 4), nn.ReLU(True),
        nn.ConvTranspose2d(NGF * 4, NGF * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(NGF * 2),
        nn.ReLU(True),
        nn.ConvTranspose2d(NGF * 2, NGF, 4, 2, 1, bias=False), nn.BatchNorm2d(NGF), nn.ReLU(True),
        nn.ConvTranspose2d(NGF, NC, 4, 2, 1, bias=False), nn.Tanh(),
    )


def discriminator() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(NC, NDF, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(NDF, NDF * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(NDF * 2),
        nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(NDF * 2, NDF * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(NDF * 4),
        nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(NDF * 4, 1, 4, 1, 0, bias=False), nn.Sigmoid(), nn.Flatten(0),
    )


def main() -> None:
    args = arguments(__doc__ or "", steps=100)
    torch.manual_seed(1)
    batch = 32
    images = torch.rand(batch * 25, NC, 32, 32) * 2 - 1
    loader = DataLoader(TensorDataset(images), batch_size=batch, shuffle=True, num_workers=1,
                        persistent_workers=args.persistent_workers)
    net_g, net_d = generator(), discriminator()
    criterion = nn.BCELoss()
    opt_d = torch.optim.Adam(net_d.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_g = torch.optim.Adam(net_g.parameters(), lr=2e-4, betas=(0.5, 0.999))
    watch = Watch(args)
    done = 0
    while done < args.steps:
        for (real,) in watch.loader(loader):
            with watch.step(real):
                n = real.size(0)
                ones, zeros = torch.ones(n), torch.zeros(n)
                net_d.zero_grad()
                fake = net_g(torch.randn(n, NZ, 1, 1))
                loss_d = criterion(net_d(real), ones) + criterion(net_d(fake.detach()), zeros)
                loss_d.backward()
                opt_d.step()
                net_g.zero_grad()
                loss_g = criterion(net_d(fake), ones)
                loss_g.backward()
                opt_g.step()
                watch.observe(loss_g)
            watch.tick()
            done += 1
            if done >= args.steps:
                break
    watch.done()


if __name__ == "__main__":
    main()
