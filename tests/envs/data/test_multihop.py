"""HotpotQA and 2WikiMultiHopQA loaders: both formats (fixtures in optima_envs/test/fixtures), evidence, ids,
malformed rows."""

import json
import re

import pytest

import optima_envs
from optima_envs.errors import DataError, DataNotFoundError
from optima_envs.test import FIXTURES
from tests.envs.data.fixtures import TWOWIKI_ROWS, multihop_to_hub, read_json_file, write_json

HOTPOT = FIXTURES / "hotpotqa"
TWOWIKI = FIXTURES / "2wikimqa"
DEV_RELEASE = HOTPOT / "hotpot_dev_distractor_v1.json"


def instances(env_id, **kwargs):
    return optima_envs.make(env_id, **kwargs).task.source.instances


class TestHotpotQA:
    @pytest.mark.parametrize("split, hub_file, release_file, count", [
        ("validation", "validation.jsonl", "hotpot_dev_distractor_v1.json", 5),
        ("train", "train.jsonl", "hotpot_train_v1.1.json", 3)])
    def test_hub_rows_and_original_release_give_identical_instances(self, split, hub_file, release_file, count):
        hub = instances("hotpotqa-ia", data_files=HOTPOT / "hub" / hub_file)
        original = instances("hotpotqa-ia", data_files=HOTPOT / release_file)
        assert len(hub) == count and hub == original
        assert instances("hotpotqa-ia", data_dir=HOTPOT / "hub", split=split) == \
            instances("hotpotqa-ia", data_dir=HOTPOT, split=split)

    def test_known_instance(self):
        first = instances("hotpotqa-ia", data_dir=HOTPOT, split="dev")[0]
        assert first.instance_id == "5f0c2a9e55429917c3d1a0b1" and first.gold == "Dunmore"
        assert len(first.evidence) == 10
        supporting = {e.title for e in first.evidence if e.supporting}
        assert supporting == {"Glass Orchard (album)", "The Lantern Keepers (band)"}
        assert first.meta["type"] == "bridge" and first.meta["level"] == "hard"
        choir = first.evidence[0]
        assert choir.title == "Copper Wire Choir"
        assert choir.text.startswith("Copper Wire Choir is a folk group based in Harlow Bay, Vessland. They perform")
        assert "  " not in choir.text

    def test_repeated_supporting_titles_count_once(self):
        second = instances("hotpotqa-ia", data_dir=HOTPOT)[1]  # supporting_facts name one page twice
        assert second.meta["supporting_titles"] == ("Ashby Rowing Club", "Fenwick Boat Club")
        assert [e.title for e in second.evidence if e.supporting] == ["Ashby Rowing Club", "Fenwick Boat Club"]

    def test_train_split_and_other_file_names(self, tmp_path):
        rows = read_json_file(HOTPOT / "hotpot_train_v1.1.json")
        ids = [r["_id"] for r in rows]
        assert [i.instance_id for i in instances("hotpotqa-ia", data_dir=HOTPOT, split="train")] == ids
        # Copies that keep the original layout under the hub's file names (e.g. *.original_format.json)
        write_json(tmp_path / "train.original_format.json", rows)
        write_json(tmp_path / "dev.original_format.json", rows[:1])
        assert [i.instance_id for i in instances("hotpotqa-ia", data_dir=tmp_path, split="train")] == ids
        assert len(instances("hotpotqa-ia", data_dir=tmp_path)) == 1

    def test_masarena_rows_with_integer_ids(self):
        loaded = instances("hotpotqa-ia", data_files=HOTPOT / "masarena/hotpotqa_validate.jsonl")
        assert len(loaded) == 3 and "37" in {i.instance_id for i in loaded}
        third = json.loads((HOTPOT / "masarena/hotpotqa_validate.jsonl").read_text().splitlines()[2])
        assert third["_id"] == 37  # an int in the file, a string id once loaded

    def test_first_sentence_only(self):
        full = instances("hotpotqa-ia", data_dir=HOTPOT)[0]
        short = instances("hotpotqa-ia", data_dir=HOTPOT, first_sentence_only=True)[0]
        assert short.evidence[0].text == "Copper Wire Choir is a folk group based in Harlow Bay, Vessland."
        assert [e.title for e in short.evidence] == [e.title for e in full.evidence]

    def test_supporting_title_missing_from_context(self, tmp_path):
        row = read_json_file(DEV_RELEASE)[0]
        row["supporting_facts"][0][0] = "No Such Page"
        path = write_json(tmp_path / "dev.json", [row])
        with pytest.raises(DataError, match=re.escape(
                f"{path}[0]: supporting_facts name ['No Such Page'] but context has no paragraph with that title")):
            instances("hotpotqa-ia", data_files=path)

    def test_malformed_context_entry(self, tmp_path):
        row = read_json_file(DEV_RELEASE)[0]
        row["context"][2] = ["Orchard Street Sessions", "not a list of sentences"]
        path = write_json(tmp_path / "dev.json", [row])
        with pytest.raises(DataError, match=re.escape(f"{path}[0]: context[2] must be [title, [sentence, ...]]")):
            instances("hotpotqa-ia", data_files=path)

    def test_hub_columns_of_unequal_length(self, tmp_path):
        row = json.loads((HOTPOT / "hub/validation.jsonl").read_text().splitlines()[0])
        row["context"]["title"].pop()
        path = tmp_path / "dev.jsonl"
        path.write_text(json.dumps(row) + "\n")
        with pytest.raises(DataError, match=re.escape(f"{path}:1: context.title has 9 entries but context.sentences has 10")):
            instances("hotpotqa-ia", data_files=path)


class TestTwoWikiMQA:
    def test_release_and_hub_formats_agree(self):
        release = instances("2wikimqa-ia", data_dir=TWOWIKI)
        hub = instances("2wikimqa-ia", data_dir=TWOWIKI / "hub")  # context.content and _id, as the hub copy has
        assert release == hub
        assert [i.instance_id for i in release] == ["2w-0001", "2w-0002", "2w-0003", "2w-0004"]

    def test_hub_rows_with_sentences_and_id(self, tmp_path):
        path = tmp_path / "validation.jsonl"
        path.write_text("".join(json.dumps(multihop_to_hub(r)) + "\n" for r in TWOWIKI_ROWS))
        assert instances("2wikimqa-ia", data_files=path) == instances("2wikimqa-ia", data_dir=TWOWIKI)

    def test_instance_fields(self):
        first = instances("2wikimqa-ia", data_dir=TWOWIKI)[0]
        assert first.gold == "Ona Tallis" and first.meta["type"] == "compositional"
        assert [e.title for e in first.evidence if e.supporting] == ["Lantern Harbour", "Mira Tallis"]
        assert first.evidence[1].text == "Lantern Harbour is a 1987 film. It was directed by Mira Tallis."
        assert first.meta["evidences"] == (("Lantern Harbour", "director", "Mira Tallis"),
                                           ("Mira Tallis", "mother", "Ona Tallis"))

    @pytest.mark.parametrize("split, count", [("train", 2), ("dev", 4), ("validation", 4), ("test", 2)])
    def test_splits(self, split, count):
        assert len(instances("2wikimqa-ia", data_dir=TWOWIKI, split=split)) == count

    def test_malformed_evidence_triple(self, tmp_path):
        path = write_json(tmp_path / "dev.json", [dict(TWOWIKI_ROWS[0], evidences=[["a", "b"]])])
        message = f"{path}[0]: evidences[0] must be [subject, relation, object], got \"['a', 'b']\""
        with pytest.raises(DataError, match=re.escape(message)):
            instances("2wikimqa-ia", data_files=path)

    def test_missing_split_file(self, tmp_path):
        with pytest.raises(DataNotFoundError, match=re.escape("2wikimqa-ia: no file for split 'test'")):
            optima_envs.make("2wikimqa-ia", data_dir=tmp_path, split="test")
