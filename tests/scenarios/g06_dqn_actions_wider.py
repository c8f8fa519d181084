# family: gather_scatter_index
# variable: actions
# A DQN replay batch: the actions were recorded from an env with 6 actions, the Q-network has 4 outputs.
import random
from collections import deque

import torch
import torch.nn as nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
memory = deque(maxlen=1000)
for _ in range(200):
    memory.append((torch.randn(8).tolist(), random.randrange(6), random.random(), torch.randn(8).tolist()))
q_net = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
batch = random.sample(memory, 32)
states = torch.tensor([s for s, _, _, _ in batch], dtype=torch.float32).to(device)
actions = torch.tensor([a for _, a, _, _ in batch]).to(device)
# %%
q_values = q_net(states)
q_taken = q_values.gather(1, actions.unsqueeze(1)).squeeze(1)
print(q_taken.mean().item())
