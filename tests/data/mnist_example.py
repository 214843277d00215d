"""A training script in the style of PyTorch's basic MNIST example, on random images.

Written for the audit's command line to run unmodified (``python -m eigprec.audit
tests/data/mnist_example.py``): it knows nothing of eigprec. It follows the shape of
PyTorch's ``examples/mnist/main.py`` -- an argparse ``main``, a two-convolution network,
Adadelta with a step learning-rate schedule, a ``train`` and a ``test`` function printing
their progress -- but draws its 28x28 images and labels from a seeded generator, as
torchvision (and its dataset download) is not available where the book is built.

Run: ``python tests/data/mnist_example.py --epochs 1 --train-size 256``
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


def random_digits(count: int, seed: int) -> TensorDataset:
    """Images normalised as MNIST's are (mean 0.1307, std 0.3081), labels 0-9."""
    g = torch.Generator().manual_seed(seed)
    images = (torch.rand(count, 1, 28, 28, generator=g) - 0.1307) / 0.3081
    labels = torch.randint(0, 10, (count,), generator=g)
    return TensorDataset(images, labels)


def train(args, model, loader, optimizer, epoch) -> None:
    model.train()
    for batch_idx, (data, target) in enumerate(loader):
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            seen = batch_idx * len(data)
            share = 100.0 * batch_idx / len(loader)
            print(
                f"Train Epoch: {epoch} [{seen}/{len(loader.dataset)} ({share:.0f}%)]"
                f"\tLoss: {loss.item():.6f}"
            )
            if args.dry_run:
                break


def test(model, loader) -> None:
    model.eval()
    total_loss, correct = 0.0, 0
    with torch.no_grad():
        for data, target in loader:
            output = model(data)
            total_loss += F.nll_loss(output, target, reduction="sum").item()
            correct += int((output.argmax(dim=1) == target).sum())
    n = len(loader.dataset)
    print(
        f"\nTest set: Average loss: {total_loss / n:.4f}, "
        f"Accuracy: {correct}/{n} ({100.0 * correct / n:.0f}%)\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="MNIST-style training on random images")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--test-batch-size", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=14)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--train-size", type=int, default=60000)
    parser.add_argument("--test-size", type=int, default=10000)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    train_loader = DataLoader(
        random_digits(args.train_size, args.seed), batch_size=args.batch_size, shuffle=True
    )
    test_loader = DataLoader(
        random_digits(args.test_size, args.seed + 1), batch_size=args.test_batch_size
    )
    model = Net()
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train(args, model, train_loader, optimizer, epoch)
        test(model, test_loader)
        scheduler.step()


if __name__ == "__main__":
    main()
