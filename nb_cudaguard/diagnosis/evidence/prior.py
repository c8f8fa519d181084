"""How often each family causes this error: the ranking a diagnosis falls back on when nothing else decides.

A log often says *that* a kernel failed and little more: ``device-side assert triggered`` alone, a cuBLAS or cuDNN
error on an already poisoned context, ``srcIndex < srcSelectDimSize`` with no frame naming the table. The families
are then ranked by how often they caused the same symptom in the dev half of the corpus of real logs
(``data/priors.json``, written by ``tools/build_priors.py``; the held-out half is never read), adjusted by what the
log's frames and words say about the kind of model (text, detection, segmentation, speech, sampling, graphs).

A prior is not evidence about this log: its confidence stays low, the report says it is a prior, and the note
names the step that decides (``%%cudacheck``, or restart, replay and diagnose).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from nb_cudaguard.families import TABLE, group_of
from nb_cudaguard.incident import catalog
from nb_cudaguard.incident.incident import Incident

# Pseudo-logs that pull a thin count toward the wider one it belongs to: a symptom's families toward its kind's
# (one dev log of a symptom must not decide every later log of it), a kind's toward all causes, and a family's
# rate in a kind of model toward no lift at all (a family seen in three logs says little about any one domain).
SMOOTHING = 5.0  # a symptom's own counts weigh half at five logs
KIND_SMOOTHING = 5.0
LIFT_PSEUDO_LOGS = 8.0
LIFT_BOUNDS = (0.5, 2.0)  # how far one kind-of-model word may move a family's prior
# Kinds of model, read from the frames (library paths, functions, code lines) and the log's words, libraries named
# in paths included. General vocabulary of each field and its common libraries only: never a project's, a thread's
# or a user's own name.
DOMAINS = {
    "text": r"transformers/|modeling_\w+|tokeniz|input_ids|attention_mask|vocab|lm_head|embed_tokens|word_embeddings"
    r"|bert|\bgpt|llama|roberta|seq2seq|\bpeft\b|\blora\b|xlnet|electra|\bt5|\bbart|AutoModel|huggingface"
    r"|CausalLM|\bllm|mistral|qwen|gemma|falcon|bloom|\bopt-\d|\btrl\b|\bsft\b|pad_token|eos_token|fairseq|\bnlp\b",
    "generation": r"\bgenerate\(|generation|sample\(|sampling|multinomial|top_p|top_k|temperature|do_sample",
    "detection": r"roi_heads?|box_head|\brpn\b|anchors?\b|bbox|detector|detection|matcher|multibox|\bnms\b|detectron"
    r"|mmdet|yolo|ultralytics",
    "segmentation": r"segment|\bseg_|\bmasks?\b|\bunet|dice|deeplab|pixel|semantic|mmseg",
    "speech": r"\bctc|speech|audio|\bwav\b|\bmel\b|tacotron|\btts\b|speaker|vocoder|espnet|whisper|wav2vec|torchaudio",
    "graph": r"edge_index|\bgcn|graph|message_?passing|propagate\(|torch_geometric|\bdgl\b",
    "classification": r"classif|num_labels|num_classes|n_classes|cross_entropy|nll_loss|CrossEntropy|NLLLoss",
    "adversarial": r"discriminator|\bgan\b|BCELoss|binary_cross_entropy",
    "vision": r"torchvision|\bresnet|\bvgg|\bvit\b|\bimages?\b|\bimg|\bcv2\b|\bPIL\b|conv2d|timm/",
}
_DOMAIN_PATTERNS = {name: re.compile(pattern, re.IGNORECASE) for name, pattern in DOMAINS.items()}


@dataclass(frozen=True)
class Prior:
    """Families ranked for one symptom: ``shares`` sum to 1; ``logs``: how many dev logs had this symptom."""

    symptom: str
    shares: dict[str, float]
    logs: int
    domains: tuple[str, ...]

    def share(self, family: str) -> float:
        return self.shares.get(family, 0.0)

    def within_group(self, family: str) -> float:
        """The family's share among the families of its own group (what decides once the group is known); a group
        none of whose families the corpus has counted splits evenly (a one-family group's family is certain)."""
        group = group_of(family)
        total = sum(v for f, v in self.shares.items() if group_of(f) == group)
        if not total:
            return 1.0 / sum(1 for row in TABLE if row.group == group)
        return self.shares.get(family, 0.0) / total

    def share_among(self, family: str, groups: frozenset[str]) -> float:
        """The family's share among the families of ``groups`` (those an assertion supports): ``within_group``
        where that is the family's own group alone."""
        if groups <= {group_of(family)}:
            return self.within_group(family)
        total = sum(v for f, v in self.shares.items() if group_of(f) in groups)
        return self.shares.get(family, 0.0) / total if total else 0.0

    def ranked(self) -> list[tuple[str, float]]:
        return sorted(self.shares.items(), key=lambda item: -item[1])

    def describe(self) -> str:
        kinds = f", in a {'/'.join(self.domains)} setting" if self.domains else ""
        return f"{self.logs} dev-corpus log(s) with the symptom `{self.symptom}`{kinds}"


def symptom_of(incident: Incident) -> str:
    """What the log says failed, in the words the counts are kept in: the asserted group, the host-side text's
    group, the secondary symptom's name, or just a device-side assert / any CUDA error."""
    named = [h for h in catalog.hits_for(incident.text, incident.assertions) if h.family != "other"]
    if named:
        kind = "assertion" if any(h.source == "assertion" for h in named) else "text"
        return f"{kind}:{group_of(named[0].family)}"
    secondary = catalog.secondary_symptoms(incident.text)
    if secondary:
        return f"after:{secondary[0].name}"
    if incident.assertions:
        return "assertion:unknown"
    if "device-side assert" in incident.text.lower():
        return "device_assert"
    return "cuda" if incident.is_cuda else "host"


def kind_of_symptom(symptom: str) -> str:
    """The wider symptom a thin one backs off to: the group an assertion or a host-side text names (either says
    the same op failed), a secondary symptom of any earlier failure, or a CUDA error that names nothing."""
    source, _, rest = symptom.partition(":")
    if source in ("assertion", "text") and rest != "unknown":
        return f"group:{rest}"
    if source == "after":
        return "after"
    return "unnamed" if symptom in ("device_assert", "assertion:unknown", "cuda") else symptom


def domains_of(incident: Incident) -> tuple[str, ...]:
    """The kinds of model the frames and the log's words point at, in ``DOMAINS`` order."""
    frames = "\n".join(f"{f.filename} {f.function} {f.line}" for f in incident.frames)
    text = f"{frames}\n{incident.text}"
    return tuple(name for name, pattern in _DOMAIN_PATTERNS.items() if pattern.search(text))


@lru_cache(maxsize=1)
def _stored() -> dict:
    return json.loads(resources.files("nb_cudaguard").joinpath("data/priors.json").read_text())


_override: list[dict] = []


def use_table(table: dict | None) -> None:
    """Score with another table (``tools/corpus_score.py --leave-one-out`` removes the log being scored)."""
    _override[:] = [table] if table is not None else []


def table() -> dict:
    return _override[0] if _override else _stored()


def prior_for(incident: Incident) -> Prior:
    return prior_from(symptom_of(incident), domains_of(incident), table())


def prior_from(symptom: str, domains: tuple[str, ...], counts: dict) -> Prior:
    """Shares of the symptom's counts backed off to its kind's and to all causes, each family moved by the lift of
    the domains seen with it."""
    overall: dict[str, int] = counts["families"]
    total = sum(overall.values()) or 1
    kind = kind_of_symptom(symptom)
    wider: dict[str, int] = {}
    for other, per in counts["symptoms"].items():
        if kind_of_symptom(other) == kind:
            for family, n in per.items():
                wider[family] = wider.get(family, 0) + n
    wider_logs = sum(wider.values())
    seen: dict[str, int] = counts["symptoms"].get(symptom, {})
    logs = sum(seen.values())
    scores = {}
    for family, n in overall.items():
        backoff = (wider.get(family, 0) + KIND_SMOOTHING * n / total) / (wider_logs + KIND_SMOOTHING)
        base = (seen.get(family, 0) + SMOOTHING * backoff) / (logs + SMOOTHING)
        scores[family] = base * _lift(family, domains, counts)
    norm = sum(scores.values()) or 1.0
    shares = {f: v / norm for f, v in scores.items() if v > 0}
    return Prior(symptom, shares, logs, domains)


def _lift(family: str, domains: tuple[str, ...], counts: dict) -> float:
    """How much more often than average the family's logs show these kinds of model, its few logs shrunk toward
    the average rate (a family never seen with a domain is not lifted by it, only slightly lowered)."""
    family_logs = counts["families"].get(family, 0)
    all_logs = sum(counts["families"].values()) or 1
    lift = 1.0
    for domain in domains:
        with_domain = counts["domains"].get(domain, {})
        p_all = (sum(with_domain.values()) + 1) / (all_logs + 2)
        p_family = (with_domain.get(family, 0) + LIFT_PSEUDO_LOGS * p_all) / (family_logs + LIFT_PSEUDO_LOGS)
        lift *= min(max(p_family / p_all, LIFT_BOUNDS[0]), LIFT_BOUNDS[1])
    return lift


def tally(rows: list[tuple[str, tuple[str, ...], str]]) -> dict:
    """The counts a table holds, from (symptom, domains, confirmed family) rows."""
    families: dict[str, int] = {}
    symptoms: dict[str, dict[str, int]] = {}
    domains: dict[str, dict[str, int]] = {}
    for symptom, kinds, family in rows:
        families[family] = families.get(family, 0) + 1
        per = symptoms.setdefault(symptom, {})
        per[family] = per.get(family, 0) + 1
        for kind in kinds:
            per_kind = domains.setdefault(kind, {})
            per_kind[family] = per_kind.get(family, 0) + 1
    return {"families": families, "symptoms": symptoms, "domains": domains}
