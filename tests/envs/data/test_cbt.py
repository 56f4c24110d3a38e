"""Children's Book Test loader: the original text files and the hub's rows."""

import re

import pytest

import optima_envs
from optima_envs.data.cbt import read_cbt_text
from optima_envs.errors import DataError
from tests.envs.data.fixtures import write_jsonl
from tests.envs.env_kwargs import SHARED_DATA

CBT = SHARED_DATA / "cbt" / "hf_datasets_dummy"


def instances(**kwargs):
    return optima_envs.make("cbt-ia", **kwargs).task.source.instances


class TestOriginalText:
    @pytest.mark.parametrize("subset", ["CN", "NE"])
    @pytest.mark.parametrize("split, name", [("train", "train"), ("valid", "valid_2000ex"), ("test", "test_2500ex")])
    def test_every_shared_file(self, subset, split, name):
        (story,) = instances(data_dir=CBT, subset=subset, split=split)
        assert story.instance_id == f"cbtest_{subset}_{name}-0"
        assert len(story.evidence) == 20 and len(story.choices) == 10
        assert story.gold in [text for _, text in story.choices]
        assert "XXXXX" in story.question and story.meta["subset"] == subset

    def test_known_story(self):
        (story,) = instances(data_dir=CBT, subset="CN", split="test")
        assert story.gold == "man"
        assert story.meta["query"] == "Do you think she will see that young XXXXX sitting under the tree ? '"
        assert story.evidence[0].text == "-LRB- 3 -RRB- Hollenmadchen ."
        assert [label for label, _ in story.choices][:3] == ["birds", "food", "maiden"]

    def test_two_stories_in_one_file(self, tmp_path):
        text = (CBT / "cbtest_NE_test_2500ex.txt").read_text()
        path = tmp_path / "cbtest_NE_test_2500ex.txt"
        path.write_text(text.rstrip("\n") + "\n\n" + text)
        assert [s.instance_id for s in instances(data_files=path, subset="NE")] == \
            ["cbtest_NE_test_2500ex-0", "cbtest_NE_test_2500ex-1"]

    def test_book_title_lines_are_skipped(self, tmp_path):
        text = (CBT / "cbtest_CN_train.txt").read_text()
        path = tmp_path / "cbtest_CN_train.txt"
        path.write_text("_BOOK_TITLE_ : Andrew_Lang___Prince_Prigio.txt.out\n" + text)
        assert instances(data_files=path) == instances(data_dir=CBT, split="train")

    def test_misnumbered_line(self, tmp_path):
        lines = (CBT / "cbtest_CN_test_2500ex.txt").read_text().splitlines()
        lines[4] = "7 " + lines[4].split(" ", 1)[1]
        path = tmp_path / "cbtest_CN_test_2500ex.txt"
        path.write_text("\n".join(lines) + "\n")
        with pytest.raises(DataError, match=re.escape(f"{path}:5: expected a line numbered 5 ('5 text'), got \"7 He might")):
            instances(data_files=path)

    def test_malformed_query_line(self, tmp_path):
        lines = (CBT / "cbtest_CN_test_2500ex.txt").read_text().splitlines()
        lines[20] = lines[20].replace("\t\t", "\t")
        path = tmp_path / "cbtest_CN_test_2500ex.txt"
        path.write_text("\n".join(lines) + "\n")
        message = f"{path}:21: the query line must be 'N query<TAB>answer<TAB><TAB>c1|...|c10'"
        with pytest.raises(DataError, match=re.escape(message)):
            instances(data_files=path)


class TestHubRows:
    def test_hub_rows_equal_original(self, tmp_path):
        rows = [r.data for r in read_cbt_text(CBT / "cbtest_NE_test_2500ex.txt")]
        write_jsonl(tmp_path / "NE" / "test.jsonl", rows)
        assert instances(data_dir=tmp_path, subset="NE") == instances(data_dir=CBT, subset="NE")

    def test_answer_not_a_candidate(self, tmp_path):
        row = dict(read_cbt_text(CBT / "cbtest_NE_test_2500ex.txt")[0].data, answer="Nobody")
        path = write_jsonl(tmp_path / "test.jsonl", [row])
        with pytest.raises(DataError, match=re.escape(f"{path}:1: the answer 'Nobody' is not among the options")):
            instances(data_files=path)
