"""Position-wise feed-forward network, section 3.3 of Vaswani et al. (2017).

Tensor layout: (B, T, d_model) in and out; (B, T, d_ff) inside.
"""

import torch.nn.functional as F
from torch import Tensor, nn

from .dropout import Dropout


class PositionwiseFeedForward(nn.Module):
    """Eq. (2), section 3.3: FFN(x) = max(0, x W_1 + b_1) W_2 + b_2.

    relu_dropout is applied to the hidden ReLU activations; the paper has none (0 by default),
    tensor2tensor's relu_dropout option is offered for experiments.

    Initialisation (the paper does not give one): W and b of each layer uniform in +-1/sqrt(fan_in),
    torch's nn.Linear default, as fairseq's transformer has it. W_2 then starts with sd
    1/sqrt(3 d_ff), 2.2x smaller than under Xavier, so each FFN sub-layer adds little to the
    residual stream at first. Measured (docs/quality.md): with Xavier here the model learned
    worse than fairseq's at equal work; this part alone closed the gap.
    """

    def __init__(self, d_model: int, d_ff: int, relu_dropout: float = 0.0):
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff)  # W_1, b_1; nn.Linear's initialisation kept (above)
        self.w2 = nn.Linear(d_ff, d_model)  # W_2, b_2
        self.relu_dropout = Dropout(relu_dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(self.relu_dropout(F.relu(self.w1(x))))  # (B, T, d_model)
