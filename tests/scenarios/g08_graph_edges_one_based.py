# family: advanced_index_out_of_bounds
# variable: src
# Message passing on a graph whose edge list (from a CSV) numbers its nodes 1..N; node features are indexed 0..N-1.
import pandas as pd
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
edges = pd.DataFrame({"src": [1, 2, 3, 4, 5, 6], "dst": [2, 3, 4, 5, 6, 1]})
num_nodes = 6
x = torch.randn(num_nodes, 4).to(device)
edge_index = torch.tensor(edges[["src", "dst"]].values.T).to(device)
# %%
src, dst = edge_index
messages = x[src]
out = torch.zeros_like(x).index_add_(0, dst, messages)
