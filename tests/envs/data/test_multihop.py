"""HotpotQA and 2WikiMultiHopQA loaders: both formats, evidence, ids, malformed rows."""

import json
import re

import pytest

import optima_envs
from optima_envs.errors import DataError, DataNotFoundError
from tests.envs.data.fixtures import TWOWIKI_ROWS, multihop_to_hub, write_2wiki_hub, write_2wiki_release, write_json
from tests.envs.env_kwargs import SHARED_DATA

HOTPOT = SHARED_DATA / "hotpotqa"


def instances(env_id, **kwargs):
    return optima_envs.make(env_id, **kwargs).task.source.instances


class TestHotpotQA:
    def test_hub_rows_and_original_release_give_identical_instances(self):
        hub = instances("hotpotqa-ia", data_files=HOTPOT / "rpt/dev.jsonl")
        original = instances("hotpotqa-ia", data_files=HOTPOT / "rpt/dev.original_format.json")
        assert len(hub) == 300 and hub == original

    def test_known_instance(self):
        first = instances("hotpotqa-ia", data_dir=HOTPOT / "rpt", split="dev")[0]
        assert first.instance_id == "5a8ce55f554299441c6b9f62" and first.gold == "Tulsa"
        assert len(first.evidence) == 10
        assert {e.title for e in first.evidence if e.supporting} == {"Tinted Windows (album)", "Tinted Windows (band)"}
        assert first.meta["type"] == "bridge" and first.meta["level"] == "hard"
        act = first.evidence[0]
        assert act.title == "Act of Congress (music group)"
        assert act.text.startswith("Act of Congress is a Birmingham, Alabama based singer-songwriter group. They play")
        assert "  " not in act.text

    def test_train_split_and_release_file_names(self, tmp_path):
        rows = json.loads((HOTPOT / "rpt/train.original_format.json").read_text())[:3]
        write_json(tmp_path / "hotpot_train_v1.1.json", rows)
        write_json(tmp_path / "hotpot_dev_distractor_v1.json", rows[:1])
        assert [i.instance_id for i in instances("hotpotqa-ia", data_dir=tmp_path, split="train")] == [r["_id"] for r in rows]
        assert len(instances("hotpotqa-ia", data_dir=tmp_path)) == 1

    def test_masarena_rows_with_integer_ids(self):
        loaded = instances("hotpotqa-ia", data_files=HOTPOT / "masarena/hotpotqa_validate.jsonl")
        assert len(loaded) == 200 and "37" in {i.instance_id for i in loaded}

    def test_first_sentence_only(self):
        full = instances("hotpotqa-ia", data_dir=HOTPOT / "rpt")[0]
        short = instances("hotpotqa-ia", data_dir=HOTPOT / "rpt", first_sentence_only=True)[0]
        assert short.evidence[0].text == "Act of Congress is a Birmingham, Alabama based singer-songwriter group."
        assert [e.title for e in short.evidence] == [e.title for e in full.evidence]

    def test_supporting_title_missing_from_context(self, tmp_path):
        row = json.loads((HOTPOT / "rpt/dev.original_format.json").read_text())[0]
        row["supporting_facts"][0][0] = "No Such Page"
        path = write_json(tmp_path / "dev.json", [row])
        with pytest.raises(DataError, match=re.escape(
                f"{path}[0]: supporting_facts name ['No Such Page'] but context has no paragraph with that title")):
            instances("hotpotqa-ia", data_files=path)

    def test_malformed_context_entry(self, tmp_path):
        row = json.loads((HOTPOT / "rpt/dev.original_format.json").read_text())[0]
        row["context"][2] = ["Abstrakt Intellekt", "not a list of sentences"]
        path = write_json(tmp_path / "dev.json", [row])
        with pytest.raises(DataError, match=re.escape(f"{path}[0]: context[2] must be [title, [sentence, ...]]")):
            instances("hotpotqa-ia", data_files=path)

    def test_hub_columns_of_unequal_length(self, tmp_path):
        row = json.loads((HOTPOT / "rpt/dev.jsonl").read_text().splitlines()[0])
        row["context"]["title"].pop()
        path = tmp_path / "dev.jsonl"
        path.write_text(json.dumps(row) + "\n")
        with pytest.raises(DataError, match=re.escape(f"{path}:1: context.title has 9 entries but context.sentences has 10")):
            instances("hotpotqa-ia", data_files=path)


class TestTwoWikiMQA:
    def test_release_and_hub_formats_agree(self, tmp_path):
        release = instances("2wikimqa-ia", data_dir=write_2wiki_release(tmp_path / "release"))
        hub = instances("2wikimqa-ia", data_dir=write_2wiki_hub(tmp_path / "hub").parent)
        assert release == hub
        assert [i.instance_id for i in release] == ["2w-0001", "2w-0002", "2w-0003", "2w-0004"]

    def test_hub_rows_with_sentences_and_id(self, tmp_path):
        path = tmp_path / "validation.jsonl"
        path.write_text("".join(json.dumps(multihop_to_hub(r)) + "\n" for r in TWOWIKI_ROWS))
        release = instances("2wikimqa-ia", data_dir=write_2wiki_release(tmp_path / "r"))
        assert instances("2wikimqa-ia", data_files=path) == release

    def test_instance_fields(self, tmp_path):
        first = instances("2wikimqa-ia", data_dir=write_2wiki_release(tmp_path))[0]
        assert first.gold == "Ona Tallis" and first.meta["type"] == "compositional"
        assert [e.title for e in first.evidence if e.supporting] == ["Lantern Harbour", "Mira Tallis"]
        assert first.evidence[1].text == "Lantern Harbour is a 1987 film. It was directed by Mira Tallis."
        assert first.meta["evidences"] == (("Lantern Harbour", "director", "Mira Tallis"),
                                           ("Mira Tallis", "mother", "Ona Tallis"))

    @pytest.mark.parametrize("split, count", [("train", 2), ("dev", 4), ("validation", 4), ("test", 2)])
    def test_splits(self, tmp_path, split, count):
        assert len(instances("2wikimqa-ia", data_dir=write_2wiki_release(tmp_path), split=split)) == count

    def test_malformed_evidence_triple(self, tmp_path):
        path = write_json(tmp_path / "dev.json", [dict(TWOWIKI_ROWS[0], evidences=[["a", "b"]])])
        message = f"{path}[0]: evidences[0] must be [subject, relation, object], got \"['a', 'b']\""
        with pytest.raises(DataError, match=re.escape(message)):
            instances("2wikimqa-ia", data_files=path)

    def test_missing_split_file(self, tmp_path):
        with pytest.raises(DataNotFoundError, match=re.escape("2wikimqa-ia: no file for split 'test'")):
            optima_envs.make("2wikimqa-ia", data_dir=tmp_path, split="test")
