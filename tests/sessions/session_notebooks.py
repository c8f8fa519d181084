"""The session notebooks (``notebooks/*.py``, jupytext's percent format) and what each one's planted bug should
be diagnosed as.

Each notebook is written as its users write it. Its cells carry one tag: ``setup`` (imports, data, model,
optimizer), ``train`` (the training cell: it appends one line to ``train_log.txt`` each time it runs), ``bug`` (the
planted bug: a device-side assert on a GPU), ``fix`` (the same cell as the user corrects it: it rebuilds
everything the bug cell bound) and ``after`` (cells that use the state afterwards).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

NOTEBOOKS_DIR = Path(__file__).with_name("notebooks")
TAGS = ("setup", "train", "bug", "fix", "after")
_HEADER = re.compile(r"^# %%(.*)$", re.MULTILINE)


@dataclass(frozen=True)
class Notebook:
    name: str
    needs: tuple[str, ...]  # the libraries it imports (the test is skipped without them)
    families: tuple[str, ...]  # the right top cause for the planted bug (label bugs: either of the two faces)
    variables: tuple[str, ...]  # the user's variable the report should name (any of these spellings)
    typo: str  # a misspelt name the user types while inspecting after the crash (it must not exist)
    cells: dict[str, list[str]] = field(default_factory=dict, compare=False, repr=False)

    @property
    def setup(self) -> list[str]:
        return self.cells["setup"]

    @property
    def train(self) -> str:
        (cell,) = self.cells["train"]
        return cell

    @property
    def bug(self) -> str:
        (cell,) = self.cells["bug"]
        return cell

    @property
    def fix(self) -> str:
        (cell,) = self.cells["fix"]
        return cell

    @property
    def after(self) -> list[str]:
        return self.cells["after"]

    def names_read_after_the_failure(self) -> set[str]:
        """The global names that the bug cell reads, and that its fix and the cells after it read before binding
        them (the restart must bring back every one of them that existed before the failure)."""
        return _free_names([self.bug]) | _free_names([self.fix, *self.after])


def _free_names(sources: list[str]) -> set[str]:
    """Names read by a run of cells before any of its statements bound them (by top-level statement: enough for
    the notebooks here, which read no name in the statement that first binds it)."""
    free: set[str] = set()
    bound: set[str] = set()
    for source in sources:
        for statement in ast.parse(source).body:
            names = [n for n in ast.walk(statement) if isinstance(n, ast.Name)]
            stored = {n.id for n in names if isinstance(n.ctx, (ast.Store, ast.Del))}
            if isinstance(statement, (ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
                stored |= (
                    {statement.name} if hasattr(statement, "name") else {a.asname or a.name for a in statement.names}
                )
            free |= {n.id for n in names if isinstance(n.ctx, ast.Load)} - stored - bound
            bound |= stored
    return free


def parse(path: Path) -> dict[str, list[str]]:
    """The tagged cells of a percent-format notebook, in order; text before the first cell is its description."""
    text = path.read_text()
    headers = list(_HEADER.finditer(text))
    cells: dict[str, list[str]] = {tag: [] for tag in TAGS}
    for header, following in zip(headers, [*headers[1:], None], strict=True):
        end = following.start() if following else len(text)
        options = header.group(1).strip()
        assert options.startswith("tags="), f"{path.name}: every cell is tagged ({options!r})"
        (tag,) = json.loads(options.removeprefix("tags="))
        cells[tag].append(text[header.end() : end].strip("\n") + "\n")
    assert all(cells[tag] for tag in TAGS), f"{path.name}: a cell of each tag {TAGS}"
    return cells


def _notebook(name: str, **expected) -> Notebook:
    return Notebook(name=name, cells=parse(NOTEBOOKS_DIR / f"{name}.py"), **expected)


LABEL_FAMILIES = ("label_out_of_range", "num_classes_mismatch")

NOTEBOOKS = [
    _notebook(
        "bert_trainer_eval_labels",
        needs=("transformers", "accelerate"),
        families=LABEL_FAMILIES,
        variables=("labels", "inputs['labels']", "val_labels", "val_ds"),
        typo="trainr",
    ),
    _notebook(
        "bert_added_tokens",
        needs=("transformers",),
        families=("vocab_resize_missing",),
        variables=("input_ids", "batch['input_ids']"),
        typo="tokeniser",
    ),
    _notebook(
        "roberta_long_sequences",
        needs=("transformers", "tokenizers"),
        families=("position_ids_too_long",),
        variables=("enc['input_ids']", "input_ids"),
        typo="long_doc",
    ),
    _notebook(
        "resnet_one_based_labels",
        needs=("torchvision", "pandas"),
        families=LABEL_FAMILIES,
        variables=("yb",),
        typo="val_lodaer",
    ),
    _notebook(
        "embedding_unknown_words",
        needs=(),
        families=("embedding_index_out_of_range",),
        variables=("ids",),
        typo="new_review",
    ),
    _notebook(
        "bce_on_logits",
        needs=(),
        families=("bce_input_range",),
        variables=("val_logits",),
        typo="val_logit",
    ),
]
