"""TriviaQA (reading comprehension, with evidence): the original release and the hub's rows.

Original release: `qa/{wikipedia,web}-{train,dev,test-without-answers}.json`, each
`{"Data": [{"QuestionId", "Question", "Answer": {"Value", "Aliases", "NormalizedAliases", ...},
"EntityPages": [{"Filename", "Title", ...}], "SearchResults": [{"Filename", "Title",
"Description", "Rank", ...}]}], ...}`, with the documents in `evidence/wikipedia/<Filename>`
(entity pages) and `evidence/web/<Filename>` (search results).
Hub (`mandarjoshi/trivia_qa`, configs `rc.wikipedia`, `rc.web`, `rc`): `{"question_id",
"question", "answer": {"value", "aliases", "normalized_aliases", ...}, "entity_pages":
{"title": [...], "wiki_context": [...], ...}, "search_results": {"title": [...], "description":
[...], "search_context": [...], ...}}`.

Evidence (`evidence=`):
- "documents" (default): the first `snippets_per_document` chunks of each document (entity
  pages first, then search results in rank order), each at most `snippet_chars` characters,
  cut at paragraph breaks (or at a space inside a long paragraph); at most `max_snippets` in all.
- "descriptions": the search engine's description snippet of each search result (web domain).
A snippet is marked supporting when it contains one of the answer's aliases (after SQuAD
normalisation): TriviaQA's own distant supervision, used here only for statistics.

Gold: a tuple of aliases, `Value` first, then `Aliases` and `NormalizedAliases`, without
repeats. Ids are `QuestionId`; a question read twice (the same id in the web and wikipedia
files, as in the hub's `rc` config) gets `#2` on its second occurrence.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from optima_envs.core.types import Evidence, TaskInstance
from optima_envs.data.common import DataConfig, DatasetSource, Row, find_files, read_json, require
from optima_envs.errors import DataError
from optima_envs.scoring import normalize_answer

Domain = Literal["wikipedia", "web", "both"]
EvidenceKind = Literal["documents", "descriptions"]
HUB_CONFIGS = {"wikipedia": "rc.wikipedia", "web": "rc.web", "both": "rc"}
RELEASE_SPLITS = {"train": "train", "validation": "dev", "test": "test-without-answers"}


def leading_snippets(text: str, budget: int, count: int) -> list[str]:
    """The first `count` chunks of `text` of at most `budget` characters, packed from whole
    paragraphs where they fit and cut at the last space before the budget where they do not."""
    chunks: list[str] = []
    current = ""
    for paragraph in text.split("\n"):
        paragraph = " ".join(paragraph.split())
        while paragraph:
            if len(chunks) >= count:
                return chunks
            room = budget - len(current) - (1 if current else 0)
            if len(paragraph) <= room:
                current, paragraph = (f"{current} {paragraph}" if current else paragraph), ""
            elif current:
                chunks.append(current)
                current = ""
            else:
                cut = paragraph.rfind(" ", 0, budget + 1)
                cut = cut if cut > 0 else budget
                chunks.append(paragraph[:cut].strip())
                paragraph = paragraph[cut:].strip()
    if current and len(chunks) < count:
        chunks.append(current)
    return chunks


def _contains_alias(text: str, aliases: tuple[str, ...]) -> bool:
    padded = f" {normalize_answer(text)} "
    return any(f" {a} " in padded for a in {normalize_answer(a) for a in aliases} if a)


class TriviaQASource(DatasetSource):
    dataset = "triviaqa-ia"
    data_folder = "triviaqa"
    default_hub_id = "mandarjoshi/trivia_qa"
    dedupe_ids = True

    def __init__(self, config: DataConfig, *, domain: Domain = "wikipedia", evidence: EvidenceKind = "documents",
                 snippet_chars: int = 600, snippets_per_document: int = 2, max_snippets: int = 8,
                 evidence_dir: str | None = None):
        self.domain, self.evidence = domain, evidence
        self.snippet_chars, self.snippets_per_document = snippet_chars, snippets_per_document
        self.max_snippets = max_snippets
        super().__init__(config)
        if evidence_dir is not None:
            self.evidence_dir: Path | None = Path(evidence_dir).expanduser()
        elif config.data_dir is not None:
            self.evidence_dir = Path(config.data_dir) / "evidence"
        elif self.files is not None:
            self.evidence_dir = self.files[0].parent.parent / "evidence"  # qa/ and evidence/ are siblings
        else:
            self.evidence_dir = None

    def _domains(self) -> tuple[str, ...]:
        return ("wikipedia", "web") if self.domain == "both" else (self.domain,)

    def locate_files(self, data_dir: str) -> tuple[Path, ...]:
        name = RELEASE_SPLITS[self.config.split]
        files: list[Path] = []
        for domain in self._domains():
            patterns = (f"qa/{domain}-{name}.json", f"{domain}-{name}.json")
            files += find_files(data_dir, patterns + self._hub_patterns(), dataset=self.dataset,
                                split=self.config.split, hint=self.hint())
        return tuple(dict.fromkeys(files))

    def _hub_patterns(self) -> tuple[str, ...]:
        split = self.config.split
        return (f"{split}.jsonl", f"{HUB_CONFIGS[self.domain]}/{split}-*.parquet")

    def hub_config(self) -> str | None:
        return HUB_CONFIGS[self.domain]

    def files_hint(self) -> str:
        return "the release's qa/ and evidence/ folders, e.g. qa/wikipedia-dev.json"

    def loader_options(self) -> tuple[tuple[str, Any], ...]:
        return (("domain", self.domain), ("evidence", self.evidence), ("snippet_chars", self.snippet_chars),
                ("snippets_per_document", self.snippets_per_document), ("max_snippets", self.max_snippets),
                ("evidence_dir", str(self.evidence_dir)))

    def read_file(self, path: Path) -> list[Row]:
        if path.suffix == ".json":
            try:
                return read_json(path, key="Data")
            except DataError:
                pass  # not a release qa file: hub rows saved as JSON
        return super().read_file(path)

    def row_key(self, row: Row) -> str | None:
        if not isinstance(row.data, dict):
            return None
        key = row.data.get("QuestionId", row.data.get("question_id"))
        return key if isinstance(key, str) else None

    # ------------------------------------------------------------------ rows
    def to_instance(self, row: Row) -> TaskInstance:
        if isinstance(row.data, dict) and "QuestionId" in row.data:
            return self._original(row)
        return self._hub(row)

    def _finish(self, row: Row, instance_id: str, question: str, aliases: list[Any],
                documents: list[tuple[str, str]], descriptions: list[tuple[str, str]]) -> TaskInstance:
        gold = tuple(dict.fromkeys(a.strip() for a in aliases if isinstance(a, str) and a.strip()))
        if not gold or gold[0] == "<unk>":
            raise row.fail("the answer is missing (the test split is released without answers; "
                           "use split='validation')")
        if self.evidence == "descriptions":
            pieces = [(title, text) for title, text in descriptions if text.strip()]
        else:
            pieces = [(title, chunk) for title, text in documents
                      for chunk in leading_snippets(text, self.snippet_chars, self.snippets_per_document)]
        if not pieces:
            missing = "search-result descriptions" if self.evidence == "descriptions" else "evidence documents"
            raise row.fail(f"no evidence: the row has no {missing} (evidence={self.evidence!r})")
        evidence = tuple(Evidence(text=" ".join(text.split()), title=title or None,
                                  supporting=_contains_alias(text, gold))
                         for title, text in pieces[:self.max_snippets])
        return TaskInstance(instance_id=instance_id, question=question, gold=gold, evidence=evidence,
                            meta={"dataset": "triviaqa"})

    def _original(self, row: Row) -> TaskInstance:
        question = require(row, "Question").strip()
        answer = row.data.get("Answer")
        if not isinstance(answer, dict):
            raise row.fail("missing field 'Answer' (the test split is released without answers; "
                           "use split='validation')")
        aliases = [require(row, "Value", container=answer, label="Answer.Value")]
        aliases += list(answer.get("Aliases") or []) + list(answer.get("NormalizedAliases") or [])
        documents, descriptions = [], []
        for key, folder in (("EntityPages", "wikipedia"), ("SearchResults", "web")):
            entries = row.data.get(key) or []
            if not isinstance(entries, list):
                raise row.fail(f"field {key!r} must be a list, got {type(entries).__name__}")
            for k, entry in enumerate(entries):
                title = entry.get("Title") or "" if isinstance(entry, dict) else ""
                if key == "SearchResults" and isinstance(entry, dict) and isinstance(entry.get("Description"), str):
                    descriptions.append((title, entry["Description"]))
                if self.evidence == "documents":
                    filename = require(row, "Filename", container=entry, label=f"{key}[{k}].Filename")
                    documents.append((title, self._document(row, folder, filename)))
        return self._finish(row, require(row, "QuestionId"), question, aliases, documents, descriptions)

    def _document(self, row: Row, folder: str, filename: str) -> str:
        if self.evidence_dir is None:
            raise row.fail("release-format rows need the evidence files: pass evidence_dir=... "
                           "(the release's evidence/ folder)")
        path = self.evidence_dir / folder / filename
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise row.fail(f"evidence file {str(path)!r} not found; pass evidence_dir=... (the release's "
                           f"evidence/ folder) or evidence='descriptions'") from None
        except UnicodeDecodeError as error:
            raise row.fail(f"evidence file {str(path)!r} is not UTF-8 ({error.reason})") from None

    def _hub(self, row: Row) -> TaskInstance:
        question = require(row, "question").strip()
        answer = require(row, "answer", dict)
        aliases = [answer.get("value"), *(answer.get("aliases") or []), *(answer.get("normalized_aliases") or [])]
        pages = row.data.get("entity_pages") or {}
        results = row.data.get("search_results") or {}
        documents = list(zip(pages.get("title") or [], pages.get("wiki_context") or []))
        documents += list(zip(results.get("title") or [], results.get("search_context") or []))
        descriptions = list(zip(results.get("title") or [], results.get("description") or []))
        if not all(isinstance(t, str) and isinstance(x, str) for t, x in documents + descriptions):
            raise row.fail("entity_pages / search_results titles and texts must be strings")
        return self._finish(row, require(row, "question_id"), question, aliases, documents, descriptions)
