"""A word-language-model-style LSTM (the published example's embedding, two LSTM layers,
dropout and linear decoder; truncated back-propagation over 35 tokens, gradient clipping and
the weights updated by hand, with no optimizer) on a synthetic token stream, batch 20, a
vocabulary of 5,000 and 128 units so that a CPU step is tens of milliseconds. No DataLoader:
the batches are slices of one tensor, as in the example."""

from __future__ import annotations

import torch
from _common import Watch, arguments
from torch import nn

VOCAB, UNITS, BPTT, BATCH = 5000, 128, 35, 20


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.2)
        self.encoder = nn.Embedding(VOCAB, UNITS)
        self.rnn = nn.LSTM(UNITS, UNITS, 2, dropout=0.2)
        self.decoder = nn.Linear(UNITS, VOCAB)

    def forward(self, x: torch.Tensor, hidden: tuple[torch.Tensor, torch.Tensor]
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        out, hidden = self.rnn(self.drop(self.encoder(x)), hidden)
        return self.decoder(self.drop(out)).view(-1, VOCAB), hidden


def main() -> None:
    args = arguments(__doc__ or "", steps=120)
    torch.manual_seed(1)
    stream = torch.randint(0, VOCAB, (BATCH * BPTT * 60,)).view(-1, BATCH)  # (time, batch)
    model = Model()
    criterion = nn.CrossEntropyLoss()
    lr = 20.0
    watch = Watch(args)
    done = 0
    while done < args.steps:
        hidden = (torch.zeros(2, BATCH, UNITS), torch.zeros(2, BATCH, UNITS))
        for i in range(0, stream.size(0) - 1 - BPTT, BPTT):
            data, target = stream[i:i + BPTT], stream[i + 1:i + 1 + BPTT].reshape(-1)
            with watch.step(data):
                hidden = (hidden[0].detach(), hidden[1].detach())
                model.zero_grad()
                output, hidden = model(data, hidden)
                loss = criterion(output, target)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
                with torch.no_grad():
                    for p in model.parameters():
                        p.add_(p.grad, alpha=-lr)
                watch.observe(loss)
            watch.tick()
            done += 1
            if done >= args.steps:
                break
    watch.done()


if __name__ == "__main__":
    main()
