"""Writes example_notebooks/*.ipynb (without outputs) from the cells below: `python tools/build_example_notebooks.py`.

Each notebook is what a Kaggle or Colab user writes, with one classic mistake: it shows the failure, the
explanation nb_cudaguard gives, the restart that rebuilds the state, and the fix. They run on a CPU: without a
GPU, `%cudaguard simulate on` makes the bad input fail the way it fails on a GPU (a device-side assert that
poisons the context). The failing cell is tagged `expected-failure` (for the reader and the tests), not
`raises-exception`: Jupyter sends a cell with that tag with `stop_on_error: false`, so Run All would not stop at it,
and stopping there, with the panel to choose what to replay, is the point. The tests add `raises-exception` in memory
so that nbclient runs on through the restart and the fix.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

OUT = Path(__file__).resolve().parent.parent / "example_notebooks"

LOAD = "%load_ext nb_cudaguard"

SETUP = """import torch

if not torch.cuda.is_available():
    %cudaguard simulate on
device = "cuda" if torch.cuda.is_available() else "cpu"
print("device:", device)"""

RESTART = """# Click "Restart & replay" in the panel above, or run this cell: the kernel restarts in place and
# replays only the cells that built what the failing cell reads (imports, data, model).
%cudaguard restart"""

CHECK_REPORT = """import nb_cudaguard

report = nb_cudaguard.get_guard().last_report
print("classification:", report.incident.classification)
print("top cause:", report.diagnosis.top.family, "in", report.diagnosis.top.variable)
print("fix:", report.diagnosis.top.fix)"""

NOTEBOOKS = {
    "01_image_classifier_196_classes.ipynb": [
        (
            "md",
            "# Car model classifier: 196 classes, 195 outputs\n\n"
            "A Stanford-Cars-style image classifier: 196 car models, and an output layer sized from a count that "
            "missed one class. On a GPU this ends in `CUDA error: device-side assert triggered`, and every later "
            "CUDA call fails too. nb_cudaguard explains it and rebuilds the session.",
        ),
        ("code", LOAD),
        ("code", SETUP),
        (
            "code",
            "import torch.nn.functional as F\n"
            "from torch import nn\n"
            "from torch.utils.data import DataLoader, TensorDataset\n\n"
            "NUM_CLASSES = 196\n"
            "torch.manual_seed(0)\n"
            "images = torch.randn(392, 3, 32, 32)\n"
            "labels = torch.arange(392) % NUM_CLASSES  # every car model, twice\n"
            "loader = DataLoader(TensorDataset(images, labels), batch_size=98, shuffle=True)",
        ),
        (
            "code",
            "class CarNet(nn.Module):\n"
            "    def __init__(self, num_classes):\n"
            "        super().__init__()\n"
            "        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), "
            "nn.Flatten())\n"
            "        self.classifier = nn.Linear(8 * 4 * 4, num_classes)\n\n"
            "    def forward(self, x):\n"
            "        return self.classifier(self.features(x))\n\n\n"
            "model = CarNet(num_classes=195).to(device)  # the bug: one class short\n"
            "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
        ),
        (
            "code",
            "for xb, yb in loader:\n"
            "    xb, yb = xb.to(device), yb.to(device)\n"
            "    loss = F.cross_entropy(model(xb), yb)\n"
            "    optimizer.zero_grad()\n"
            "    loss.backward()\n"
            "    optimizer.step()",
            ["expected-failure"],
        ),
        ("md", "The panel above names the cause. The same facts, from Python:"),
        ("code", CHECK_REPORT),
        ("code", RESTART),
        (
            "md",
            "## The fix\n\nSize the head from the data, not from a hand-typed number. `loader` and `NUM_CLASSES` "
            "came back with the replay.",
        ),
        (
            "code",
            "model = CarNet(num_classes=NUM_CLASSES).to(device)\n"
            "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "for xb, yb in loader:\n"
            "    xb, yb = xb.to(device), yb.to(device)\n"
            "    loss = F.cross_entropy(model(xb), yb)\n"
            "    optimizer.zero_grad()\n"
            "    loss.backward()\n"
            "    optimizer.step()\n"
            'print(f"trained one epoch on {len(loader.dataset)} images, {NUM_CLASSES} classes: '
            'loss {loss.item():.3f}")',
        ),
    ],
    "02_text_classifier_labels_out_of_range.ipynb": [
        (
            "md",
            "# News topic classifier: labels outside `num_labels`\n\n"
            "AG News ships its topics as 1, 2, 3, 4. The model has `num_labels = 4` outputs, numbered 0 to 3, so "
            "topic 4 is out of range: on a GPU, `nll_loss` stops with a device-side assert.",
        ),
        ("code", LOAD),
        ("code", SETUP),
        (
            "code",
            "from torch import nn\n\n"
            "texts = [\n"
            '    "stocks rally as markets close higher",\n'
            '    "team wins the cup final",\n'
            '    "new phone chip is faster",\n'
            '    "leaders meet to discuss trade",\n'
            '    "shares fall after weak earnings",\n'
            '    "striker scores twice",\n'
            '    "software update fixes bugs",\n'
            '    "election results announced",\n'
            "]\n"
            "topics = [3, 2, 4, 1, 3, 2, 4, 1]  # AG News: 1 World, 2 Sports, 3 Business, 4 Sci/Tech\n"
            'vocab = {"[PAD]": 0, "[UNK]": 1}\n'
            "for text in texts:\n"
            "    for word in text.split():\n"
            "        vocab.setdefault(word, len(vocab))\n\n\n"
            "def encode(batch, width=8):\n"
            "    rows = [[vocab.get(w, 1) for w in text.split()][:width] for text in batch]\n"
            "    return torch.tensor([row + [0] * (width - len(row)) for row in rows])\n\n\n"
            "input_ids = encode(texts)\n"
            "labels = torch.tensor(topics)",
        ),
        (
            "code",
            "class ClassifierConfig:\n"
            "    def __init__(self, vocab_size, num_labels, hidden_size=32):\n"
            "        self.vocab_size, self.num_labels, self.hidden_size = vocab_size, num_labels, hidden_size\n\n\n"
            "class BagOfWordsClassifier(nn.Module):\n"
            "    def __init__(self, config):\n"
            "        super().__init__()\n"
            "        self.config = config\n"
            "        self.embeddings = nn.EmbeddingBag(config.vocab_size, config.hidden_size, padding_idx=0)\n"
            "        self.classifier = nn.Linear(config.hidden_size, config.num_labels)\n\n"
            "    def forward(self, input_ids, labels=None):\n"
            "        logits = self.classifier(self.embeddings(input_ids))\n"
            "        loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None\n"
            "        return loss, logits\n\n\n"
            "config = ClassifierConfig(vocab_size=len(vocab), num_labels=4)\n"
            "model = BagOfWordsClassifier(config).to(device)\n"
            "optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)",
        ),
        (
            "code",
            "for _ in range(3):\n"
            "    loss, logits = model(input_ids.to(device), labels=labels.to(device))\n"
            "    optimizer.zero_grad()\n"
            "    loss.backward()\n"
            "    optimizer.step()",
            ["expected-failure"],
        ),
        ("code", CHECK_REPORT),
        ("code", RESTART),
        ("md", "## The fix\n\nShift the topics to 0-based ids once, where the labels are made."),
        (
            "code",
            "labels = torch.tensor(topics) - 1\n"
            "assert labels.min() >= 0 and labels.max() < config.num_labels\n"
            "for _ in range(3):\n"
            "    loss, logits = model(input_ids.to(device), labels=labels.to(device))\n"
            "    optimizer.zero_grad()\n"
            "    loss.backward()\n"
            "    optimizer.step()\n"
            'print(f"trained 3 epochs, labels 0..{config.num_labels - 1}: loss {loss.item():.3f}")',
        ),
    ],
    "03_new_tokens_beyond_embedding.ipynb": [
        (
            "md",
            "# Added tokens, forgotten `resize_token_embeddings`\n\n"
            "Fine-tuning a language model on chat data: new special tokens go into the tokenizer, but the "
            "model's embedding table keeps its old size. The new ids index past its end, and on a GPU "
            "`indexSelectLargeIndex` stops with a device-side assert.",
        ),
        ("code", LOAD),
        ("code", SETUP),
        (
            "code",
            "from torch import nn\n\n\n"
            "class WordTokenizer:\n"
            '    """Word-level, with the parts of a Hugging Face tokenizer this notebook uses."""\n\n'
            "    def __init__(self, words):\n"
            '        self.vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", *words])}\n\n'
            "    def __len__(self):\n"
            "        return len(self.vocab)\n\n"
            "    def add_tokens(self, tokens):\n"
            "        for token in tokens:\n"
            "            self.vocab.setdefault(token, len(self.vocab))\n\n"
            "    def convert_tokens_to_ids(self, tokens):\n"
            '        return [self.vocab.get(t, self.vocab["[UNK]"]) for t in tokens]\n\n'
            "    def __call__(self, texts, width=8):\n"
            "        rows = [self.convert_tokens_to_ids(t.split())[:width] for t in texts]\n"
            '        return {"input_ids": torch.tensor([r + [0] * (width - len(r)) for r in rows])}\n\n\n'
            "class LMConfig:\n"
            "    def __init__(self, vocab_size, hidden_size=16):\n"
            "        self.vocab_size, self.hidden_size = vocab_size, hidden_size\n\n\n"
            "class TinyLM(nn.Module):\n"
            "    def __init__(self, config):\n"
            "        super().__init__()\n"
            "        self.config = config\n"
            "        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)\n"
            "        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size)\n\n"
            "    def resize_token_embeddings(self, new_size):\n"
            "        old = self.embed_tokens\n"
            "        self.embed_tokens = nn.Embedding(new_size, old.embedding_dim).to(old.weight.device)\n"
            "        with torch.no_grad():\n"
            "            self.embed_tokens.weight[: old.num_embeddings] = old.weight\n"
            "        self.lm_head = nn.Linear(old.embedding_dim, new_size).to(old.weight.device)\n"
            "        self.config.vocab_size = new_size\n\n"
            "    def forward(self, input_ids):\n"
            "        return self.lm_head(self.embed_tokens(input_ids))",
        ),
        (
            "code",
            'words = ["hello", "how", "are", "you", "today", "i", "am", "fine", "thanks"]\n'
            "tokenizer = WordTokenizer(words)\n"
            "model = TinyLM(LMConfig(vocab_size=len(tokenizer))).to(device)\n"
            'tokenizer.add_tokens(["<|user|>", "<|assistant|>"])  # the chat template\'s markers\n'
            'batch = tokenizer(["<|user|> how are you today", "<|assistant|> i am fine thanks"])',
        ),
        (
            "code",
            'logits = model(batch["input_ids"].to(device))',
            ["expected-failure"],
        ),
        ("code", CHECK_REPORT),
        ("code", RESTART),
        ("md", "## The fix\n\nResize the embeddings whenever the tokenizer grows."),
        (
            "code",
            "model.resize_token_embeddings(len(tokenizer))\n"
            'logits = model(batch["input_ids"].to(device))\n'
            "rows = model.embed_tokens.num_embeddings\n"
            'print(f"embedding rows {rows} = len(tokenizer) {len(tokenizer)}; logits {tuple(logits.shape)}")',
        ),
    ],
    "04_bce_loss_on_raw_logits.ipynb": [
        (
            "md",
            "# Multi-label tagging: `BCELoss` on raw logits\n\n"
            "`nn.BCELoss` wants probabilities in [0, 1]; a linear layer gives logits of any sign. On a GPU the "
            "loss kernel's `input_val >= zero && input_val <= one` assertion stops the process's CUDA context.",
        ),
        ("code", LOAD),
        ("code", SETUP),
        (
            "code",
            "from torch import nn\n\n"
            "torch.manual_seed(0)\n"
            "NUM_TAGS = 5\n"
            "features = torch.randn(64, 20)\n"
            "tags = (torch.rand(64, NUM_TAGS) > 0.7).float()  # several tags per sample\n"
            "model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, NUM_TAGS)).to(device)\n"
            "optimizer = torch.optim.Adam(model.parameters(), lr=0.01)\n"
            "criterion = nn.BCELoss()",
        ),
        (
            "code",
            "for _ in range(5):\n"
            "    logits = model(features.to(device))\n"
            "    loss = criterion(logits, tags.to(device))\n"
            "    optimizer.zero_grad()\n"
            "    loss.backward()\n"
            "    optimizer.step()",
            ["expected-failure"],
        ),
        ("code", CHECK_REPORT),
        ("code", RESTART),
        (
            "md",
            "## The fix\n\n`BCEWithLogitsLoss` applies the sigmoid itself, in a numerically stable way.",
        ),
        (
            "code",
            "criterion = nn.BCEWithLogitsLoss()\n"
            "for _ in range(5):\n"
            "    logits = model(features.to(device))\n"
            "    loss = criterion(logits, tags.to(device))\n"
            "    optimizer.zero_grad()\n"
            "    loss.backward()\n"
            "    optimizer.step()\n"
            'print(f"5 steps with BCEWithLogitsLoss: loss {loss.item():.3f}")',
        ),
    ],
}


def build(cells: list[tuple]) -> nbformat.NotebookNode:
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.metadata["language_info"] = {"name": "python"}
    for kind, source, *tags in cells:
        cell = nbformat.v4.new_markdown_cell(source) if kind == "md" else nbformat.v4.new_code_cell(source)
        if tags:
            cell.metadata["tags"] = tags[0]
        cell.id = f"c{len(notebook.cells):02d}"
        notebook.cells.append(cell)
    return notebook


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for name, cells in NOTEBOOKS.items():
        nbformat.write(build(cells), OUT / name)
        print(OUT / name)


if __name__ == "__main__":
    main()
