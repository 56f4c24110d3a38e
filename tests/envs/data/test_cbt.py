"""Children's Book Test loader: the original text files and the hub's rows (fixtures in optima_envs/test/fixtures/cbt)."""

import re

import pytest

import optima_envs
from optima_envs.data.cbt import read_cbt_text
from optima_envs.errors import DataError
from optima_envs.test import FIXTURES
from tests.envs.data.fixtures import write_jsonl

CBT = FIXTURES / "cbt"


def instances(**kwargs):
    return optima_envs.make("cbt-ia", **kwargs).task.source.instances


class TestOriginalText:
    @pytest.mark.parametrize("subset", ["CN", "NE"])
    @pytest.mark.parametrize("split, name", [("train", "train"), ("valid", "valid_2000ex"), ("test", "test_2500ex")])
    def test_every_release_file(self, subset, split, name):
        stories = instances(data_dir=CBT, subset=subset, split=split)
        assert len(stories) == (2 if (subset, split) == ("CN", "test") else 1)
        for k, story in enumerate(stories):
            assert story.instance_id == f"cbtest_{subset}_{name}-{k}"
            assert len(story.evidence) == 20 and len(story.choices) == 10
            assert story.gold in [text for _, text in story.choices]
            assert "XXXXX" in story.question and story.meta["subset"] == subset

    def test_known_story(self):
        story = instances(data_dir=CBT, subset="CN", split="test")[0]
        assert story.gold == "man"
        assert story.meta["query"] == ("And ever after , when he passed the stone in the forest , he bowed to it as a "
                                       "wise XXXXX should .")
        assert story.evidence[0].text == "-LRB- 2 -RRB- The Miller 's Gift ."
        assert [label for label, _ in story.choices][:3] == ["basket", "bread", "cottage"]

    def test_named_entity_story(self):
        (story,) = instances(data_dir=CBT, subset="NE")
        assert story.gold == "Wenna" and story.choices[:2] == (("Carrow", "Carrow"), ("Jory", "Jory"))
        assert [k for k, e in enumerate(story.evidence, 1) if e.supporting] == [4, 9, 12, 19]  # they name Wenna

    def test_two_stories_in_one_file(self, tmp_path):
        text = (CBT / "cbtest_NE_test_2500ex.txt").read_text()
        path = tmp_path / "cbtest_NE_test_2500ex.txt"
        path.write_text(text.rstrip("\n") + "\n\n" + text)
        assert [s.instance_id for s in instances(data_files=path, subset="NE")] == \
            ["cbtest_NE_test_2500ex-0", "cbtest_NE_test_2500ex-1"]

    def test_book_title_lines_are_skipped(self, tmp_path):
        text = (CBT / "cbtest_CN_train.txt").read_text()
        assert text.startswith("_BOOK_TITLE_ : ")
        path = tmp_path / "cbtest_CN_train.txt"
        path.write_text(text.split("\n", 1)[1])  # the same story without its book's title line
        assert instances(data_files=path) == instances(data_dir=CBT, split="train")
        path.write_text(text + text)  # two books, each opened by its title line
        assert [s.instance_id for s in instances(data_files=path)] == ["cbtest_CN_train-0", "cbtest_CN_train-1"]

    def test_misnumbered_line(self, tmp_path):
        lines = (CBT / "cbtest_CN_test_2500ex.txt").read_text().splitlines()
        lines[4] = "7 " + lines[4].split(" ", 1)[1]
        path = tmp_path / "cbtest_CN_test_2500ex.txt"
        path.write_text("\n".join(lines) + "\n")
        message = f"{path}:5: expected a line numbered 5 ('5 text'), got '7 She sat"
        with pytest.raises(DataError, match=re.escape(message)):
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
    @pytest.mark.parametrize("subset", ["CN", "NE"])
    def test_hub_rows_equal_original(self, subset):
        assert instances(data_dir=CBT / "hub", subset=subset) == instances(data_dir=CBT, subset=subset)

    def test_release_rows_in_hub_layout(self, tmp_path):
        rows = [r.data for r in read_cbt_text(CBT / "cbtest_NE_test_2500ex.txt")]
        write_jsonl(tmp_path / "NE" / "test.jsonl", rows)
        assert instances(data_dir=tmp_path, subset="NE") == instances(data_dir=CBT, subset="NE")

    def test_answer_not_a_candidate(self, tmp_path):
        row = dict(read_cbt_text(CBT / "cbtest_NE_test_2500ex.txt")[0].data, answer="Nobody")
        path = write_jsonl(tmp_path / "test.jsonl", [row])
        with pytest.raises(DataError, match=re.escape(f"{path}:1: the answer 'Nobody' is not among the options")):
            instances(data_files=path)
