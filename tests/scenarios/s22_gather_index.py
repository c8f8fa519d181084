# family: gather_scatter_index
# variable: actions
# A DQN update: Q-values gathered at the actions taken, one action id past the 3 the network has.
import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"
net = nn.Linear(6, 3).to(device)
states = torch.randn(4, 6)
actions = torch.tensor([0, 2, 5, 1])
q = net(states.to(device))
# %%
picked = q.gather(1, actions.to(device).unsqueeze(1))
