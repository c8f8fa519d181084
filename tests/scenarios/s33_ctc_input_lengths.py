# family: ctc_loss
# variable: input_lengths
# CTC input lengths larger than the number of time steps the model produced.
import torch
import torch.nn.functional as F

device = "cuda" if torch.cuda.is_available() else "cpu"
log_probs = torch.randn(50, 2, 20, device=device).log_softmax(2)
targets = torch.randint(1, 20, (2, 10), device=device)
input_lengths = torch.tensor([60, 50])
target_lengths = torch.tensor([10, 10])
# %%
loss = F.ctc_loss(log_probs, targets, input_lengths, target_lengths)
