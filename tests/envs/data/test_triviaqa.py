"""TriviaQA loader: release qa + evidence files, hub rows, snippets, aliases, ids (fixtures in
optima_envs/test/fixtures/triviaqa)."""

import json
import re

import pytest

import optima_envs
from optima_envs.data.common import DataWarning
from optima_envs.data.triviaqa import leading_snippets
from optima_envs.errors import ConfigError, DataError
from optima_envs.test import FIXTURES
from tests.envs.data.fixtures import write_json, write_jsonl

RC = FIXTURES / "triviaqa"


def instances(**kwargs):
    return optima_envs.make("triviaqa-ia", **kwargs).task.source.instances


class TestLeadingSnippets:
    def test_packs_paragraphs_within_budget(self):
        assert leading_snippets("aa bb\n\ncc\ndd ee ff", budget=9, count=5) == ["aa bb cc", "dd ee ff"]

    def test_cuts_long_paragraph_at_a_space(self):
        assert leading_snippets("one two three four", budget=9, count=5) == ["one two", "three", "four"]

    def test_stops_at_count(self):
        assert leading_snippets("a\nb\nc", budget=1, count=2) == ["a", "b"]

    def test_word_longer_than_budget_is_cut(self):
        assert leading_snippets("abcdefgh", budget=3, count=5) == ["abc", "def", "gh"]


class TestRelease:
    def test_gold_is_value_then_aliases_without_repeats(self):
        doyle = next(i for i in instances(data_dir=RC, domain="web", split="train") if i.instance_id == "qb_4412")
        assert doyle.gold[:4] == ("Arthur Conan Doyle", "Sir Arthur Conan Doyle", "A. Conan Doyle",
                                  "Doyle, Arthur Conan")
        assert len(doyle.gold) == len(set(doyle.gold)) and "arthur conan doyle" in doyle.gold
        assert doyle.gold_text == "Arthur Conan Doyle"

    def test_snippets_respect_the_budget_and_mark_support(self):
        loaded = instances(data_dir=RC, domain="web", split="train", snippet_chars=300, snippets_per_document=3)
        for instance in loaded:
            assert instance.evidence and all(len(e.text) <= 300 for e in instance.evidence)
        canberra = next(i for i in loaded if i.instance_id == "sfq_9031")
        assert [e.title for e in canberra.evidence][:3] == ["Australia", "Australia", "Australia"]
        assert any(e.supporting and "Canberra" in e.text for e in canberra.evidence)
        assert not all(e.supporting for e in canberra.evidence)

    def test_max_snippets(self):
        assert all(len(i.evidence) <= 3 for i in instances(data_dir=RC, domain="web", split="train", max_snippets=3))

    def test_both_domains_keep_ids_unique(self):
        loaded = instances(data_dir=RC, domain="both", split="dev")
        assert [i.instance_id for i in loaded] == ["qb_7001", "tc_5150", "qb_7001#2", "odql_3302"]

    def test_descriptions(self):
        with pytest.warns(DataWarning, match=re.escape("web-dev.json[2]: no evidence: the row has no search-result descriptions")):
            loaded = instances(data_dir=RC, domain="web", evidence="descriptions", on_error="skip", split="dev")
        assert [i.instance_id for i in loaded] == ["tc_5150", "qb_7001"]
        sistine = loaded[1]
        assert sistine.evidence[0].text.startswith("The ceiling of the Sistine Chapel was painted by Michelangelo")
        assert sistine.evidence[0].title == "Sistine Chapel Ceiling | Vatican Museums guide ..."

    def test_descriptions_need_the_web_domain(self):
        with pytest.raises(ConfigError, match=re.escape("triviaqa-ia: evidence='descriptions' needs search results")):
            optima_envs.make("triviaqa-ia", data_dir=RC, evidence="descriptions")

    def test_test_split_has_no_answers(self):
        with pytest.raises(DataError, match=re.escape(
                f"{RC / 'qa/wikipedia-test-without-answers.json'}[0]: missing field 'Answer' (the test split is "
                f"released without answers; use split='validation')")):
            instances(data_dir=RC, split="test")

    def test_missing_evidence_file(self, tmp_path):
        data = json.loads((RC / "qa/wikipedia-dev.json").read_text())
        write_json(tmp_path / "qa" / "wikipedia-dev.json", data)
        missing = tmp_path / "evidence" / "wikipedia" / "Michelangelo.txt"
        with pytest.raises(DataError, match=re.escape(f"[0]: evidence file '{missing}' not found; pass evidence_dir=")):
            instances(data_dir=tmp_path)

    def test_sample_with_separate_evidence_dir(self, tmp_path):
        sample = RC / "sample/triviaqa_sample.json"  # a qa file without "Split", beside evidence/ via ..
        (only,) = instances(data_files=sample)
        assert only.instance_id == "qb_7001" and only.gold_text == "Michelangelo"
        assert {e.title for e in only.evidence} == {"Michelangelo",
                                                    "Sistine Chapel Ceiling | Vatican Museums guide ..."}
        elsewhere = write_json(tmp_path / "samples" / "triviaqa_sample.json", json.loads(sample.read_text()))
        with pytest.raises(DataError, match=re.escape("not found; pass evidence_dir=")):
            instances(data_files=elsewhere)
        assert instances(data_files=elsewhere, evidence_dir=RC / "evidence") == (only,)


class TestHubRows:
    def _hub_row(self, release_row):
        pages = release_row.get("EntityPages", [])
        answer = release_row["Answer"]
        return {
            "question_id": release_row["QuestionId"], "question": release_row["Question"],
            "answer": {"value": answer["Value"], "aliases": answer["Aliases"],
                       "normalized_aliases": answer["NormalizedAliases"]},
            "entity_pages": {"title": [p["Title"] for p in pages], "filename": [p["Filename"] for p in pages],
                             "wiki_context": [(RC / "evidence/wikipedia" / p["Filename"]).read_text() for p in pages]},
            "search_results": {"title": [], "description": [], "search_context": []},
        }

    def test_hub_rows_equal_release_rows(self, tmp_path):
        rows = json.loads((RC / "qa/wikipedia-train.json").read_text())["Data"]
        write_jsonl(tmp_path / "validation.jsonl", [self._hub_row(r) for r in rows])
        assert instances(data_dir=tmp_path) == instances(data_dir=RC, split="train")

    def test_committed_hub_rows_equal_release_rows(self):
        assert instances(data_dir=RC / "hub", domain="web") == instances(data_dir=RC, domain="web", split="dev")

    @pytest.mark.filterwarnings("ignore::optima_envs.data.common.DataWarning")
    def test_hub_descriptions_equal_release_descriptions(self):
        sources = {name: optima_envs.make("triviaqa-ia", data_dir=data_dir, domain="web", evidence="descriptions",
                                          on_error="skip", split=split).task.source
                   for name, data_dir, split in (("hub", RC / "hub", "validation"), ("release", RC, "dev"))}
        assert sources["hub"].instances == sources["release"].instances and len(sources["hub"]) == 2
        assert [where for where, _ in sources["hub"].skipped] == [f"{RC / 'hub/validation.jsonl'}:3"]

    def test_hub_test_rows_without_answers(self, tmp_path):
        row = self._hub_row(json.loads((RC / "qa/wikipedia-train.json").read_text())["Data"][0])
        row["answer"] = {"value": "<unk>", "aliases": [], "normalized_aliases": []}
        path = write_jsonl(tmp_path / "test.jsonl", [row])
        with pytest.raises(DataError, match=re.escape(f"{path}:1: the answer is missing (the test split")):
            instances(data_files=path)


class TestIds:
    def test_repeat_suffix_does_not_depend_on_the_subset(self):
        # qb_7001 is in wikipedia-dev.json (read first: entity page only) and in web-dev.json
        # (entity page and search results): the web copy is always "qb_7001#2".
        seen = set()
        for seed in range(8):
            for item in instances(data_dir=RC, domain="both", split="dev", limit=2, seed=seed):
                titles = {e.title for e in item.evidence}
                if item.instance_id == "qb_7001":
                    assert titles == {"Michelangelo"}
                elif item.instance_id == "qb_7001#2":
                    assert any("|" in t for t in titles)
                seen.add(item.instance_id)
        assert {"qb_7001", "qb_7001#2"} <= seen
