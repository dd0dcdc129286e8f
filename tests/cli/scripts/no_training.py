"""Neither a DataLoader nor an optimizer: nothing trainpace run can see."""

import torch

print("script: sum", float(torch.arange(10.0).sum()))
