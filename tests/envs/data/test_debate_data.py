"""GSM8K, MATH, ARC-Challenge and MMLU loaders: every shared format, gold answers, ids, errors."""

import csv
import re

import pytest

import optima_envs
from optima_envs.errors import ConfigError, DataError
from tests.envs.data.fixtures import write_json, write_jsonl
from tests.envs.env_kwargs import SHARED_DATA

ARC = SHARED_DATA / "arc_challenge"
MMLU = SHARED_DATA / "mmlu"


def instances(env_id, **kwargs):
    return optima_envs.make(env_id, **kwargs).task.source.instances


class TestGSM8K:
    def test_shared_test_split(self):
        loaded = instances("gsm8k-debate", data_dir=SHARED_DATA / "gsm8k")
        assert len(loaded) == 1319
        first = loaded[0]
        assert (first.instance_id, first.gold) == ("test-0", "18")
        assert first.question.startswith("Janet\u2019s ducks lay 16 eggs per day.")
        assert first.meta["solution"].endswith("#### 18")

    def test_thousands_separator_and_sign(self, tmp_path):
        path = write_jsonl(tmp_path / "train.jsonl", [{"question": "q1", "answer": "so\n#### 1,250"},
                                                      {"question": "q2", "answer": "so\n#### -3"}])
        assert [i.gold for i in instances("gsm8k-debate", data_dir=tmp_path, split="train")] == ["1250", "-3"]
        assert [i.instance_id for i in instances("gsm8k-debate", data_files=path)] == ["train-0", "train-1"]

    @pytest.mark.parametrize("answer, message", [
        ("no marker", "field 'answer' has no '#### <number>' line"),
        ("x\n#### eighteen", "the final answer after '####' is not a number: 'eighteen'"),
    ])
    def test_bad_answers(self, tmp_path, answer, message):
        path = write_jsonl(tmp_path / "test.jsonl", [{"question": "q", "answer": answer}])
        with pytest.raises(DataError, match=re.escape(f"{path}:1: {message}")):
            instances("gsm8k-debate", data_files=path)


class TestMATH:
    def test_full_test_split_gold_is_last_box(self):
        loaded = instances("math-debate", data_dir=SHARED_DATA / "math")
        assert len(loaded) == 5000
        assert (loaded[0].instance_id, loaded[0].gold, loaded[0].meta["level"]) == ("MATH_test_5000-0", "2", "Level 3")

    def test_math500_uses_answer_and_unique_id(self):
        first = instances("math-debate", data_dir=SHARED_DATA / "math", subset="math500")[0]
        assert first.instance_id == "test/precalculus/807.json"
        assert first.gold == "\\left( 3, \\frac{\\pi}{2} \\right)"

    def test_release_per_problem_files(self, tmp_path):
        problem = {"problem": "What is $1/2+0$?", "level": "Level 1", "type": "Algebra",
                   "solution": "First $\\boxed{1}$ is wrong; it is $\\boxed{\\frac{1}{2}}$."}
        write_json(tmp_path / "MATH/test/algebra/12.json", problem)
        write_json(tmp_path / "MATH/test/geometry/3.json", dict(problem, type="Geometry"))
        loaded = instances("math-debate", data_dir=tmp_path / "MATH")
        assert [(i.instance_id, i.gold) for i in loaded] == [("test/algebra/12.json", "\\frac{1}{2}"),
                                                           ("test/geometry/3.json", "\\frac{1}{2}")]

    def test_solution_without_box(self, tmp_path):
        path = write_jsonl(tmp_path / "test.jsonl", [{"problem": "p", "solution": "It is 3."}])
        with pytest.raises(DataError, match=re.escape(f"{path}:1: field 'solution' has no \\boxed{{...}} answer")):
            instances("math-debate", data_files=path)

    def test_math500_is_test_only(self):
        with pytest.raises(ConfigError, match=re.escape("math-debate: MATH-500 has only a test split, got split='train'")):
            optima_envs.make("math-debate", subset="math500", split="train")


class TestARC:
    def test_original_and_restructured_agree(self):
        original = {i.instance_id: i for i in instances("arc-debate", data_dir=ARC)}
        restructured = instances("arc-debate", data_files=ARC / "basic_evaluator/arc_challenge_test.jsonl")
        assert len(original) == 1150 and len(restructured) == 1172
        common = [i for i in restructured if i.instance_id in original]
        assert len(common) == 1150 and all(original[i.instance_id] == i for i in common)

    def test_hub_rows_map_digit_labels_to_letters(self):
        hub = {i.instance_id: i for i in instances("arc-debate", data_files=ARC / "ARC-Challenge_validation.hf_format.jsonl")}
        dev = instances("arc-debate", data_dir=ARC, split="dev")
        assert len(hub) == 299 and all(hub[i.instance_id].choices == i.choices and hub[i.instance_id].gold == i.gold
                                       for i in dev)
        digits = [i for i in hub.values() if i.meta["original_labels"][0] == "1"]
        assert digits and all(label in "ABCDE" for i in digits for label, _ in i.choices)

    def test_known_item(self):
        first = instances("arc-debate", data_dir=ARC)[0]
        assert first.instance_id == "Mercury_7175875" and first.gold == "C"
        assert first.choices[2] == ("C", "Planetary days will become shorter.")

    def test_digit_labels_in_original_format(self, tmp_path):
        row = {"id": "X_1", "question": {"stem": "s?", "choices": [{"text": t, "label": str(k)}
                                                                  for k, t in enumerate("wxyz", 1)]}, "answerKey": "3"}
        path = write_jsonl(tmp_path / "ARC-Challenge-Test.jsonl", [row])
        (item,) = instances("arc-debate", data_files=path)
        assert item.gold == "C" and item.choices == (("A", "w"), ("B", "x"), ("C", "y"), ("D", "z"))

    def test_answer_key_not_an_option(self, tmp_path):
        row = {"id": "X_1", "question": "s?", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "E"}
        path = write_jsonl(tmp_path / "validation.jsonl", [row])
        with pytest.raises(DataError, match=re.escape(f"{path}:1: the answer key 'E' is not one of the labels ['A', 'B']")):
            instances("arc-debate", data_files=path)


class TestMMLU:
    @pytest.mark.parametrize("split, count", [("test", 14042), ("val", 1531), ("dev", 285)])
    def test_shared_splits(self, split, count):
        loaded = instances("mmlu-debate", data_dir=MMLU, split=split)
        assert len(loaded) == count and len({i.meta["subject"] for i in loaded}) == 57

    def test_subject_and_ids_from_file_names(self):
        first = instances("mmlu-debate", data_dir=MMLU, subjects="anatomy")[0]
        row = next(csv.reader((MMLU / "test/anatomy_test.csv").open(newline="")))
        assert (first.instance_id, first.meta["subject"], first.gold) == ("anatomy_test-0", "anatomy", row[5])
        assert first.question == row[0] and first.choices == tuple(zip("ABCD", row[1:5]))

    def test_hub_rows_equal_csv_rows(self, tmp_path):
        subjects = ["astronomy", "virology"]
        rows = []
        for subject in subjects:
            for record in csv.reader((MMLU / f"val/{subject}_val.csv").open(newline="")):
                rows.append({"question": record[0], "subject": subject, "choices": record[1:5],
                             "answer": "ABCD".index(record[5])})
        write_jsonl(tmp_path / "validation.jsonl", rows)
        assert instances("mmlu-debate", data_dir=tmp_path, split="validation") == \
            instances("mmlu-debate", data_dir=MMLU, split="validation", subjects=subjects)
        assert len(instances("mmlu-debate", data_dir=tmp_path, split="validation", subjects=["virology"])) == 18

    def test_unknown_subject(self):
        message = "mmlu-debate: unknown MMLU subject 'anatomyy'. Did you mean 'anatomy'?"
        with pytest.raises(ConfigError, match=re.escape(message)):
            optima_envs.make("mmlu-debate", data_dir=MMLU, subjects=["anatomyy"])

    def test_bad_answer_letter(self, tmp_path):
        path = tmp_path / "test" / "virology_test.csv"
        path.parent.mkdir()
        path.write_text("q,a,b,c,d,A\nq2,a,b,c,d,E\n")
        message = f"{path}:2: the answer must be one of ['A', 'B', 'C', 'D'] (or 0-3), got 'E'"
        with pytest.raises(DataError, match=re.escape(message)):
            instances("mmlu-debate", data_dir=tmp_path)

    def test_wrong_column_count(self, tmp_path):
        path = tmp_path / "virology_test.csv"
        path.write_text("q,a,b,c,A\n")
        with pytest.raises(DataError, match=re.escape(f"{path}:1: expected 6 columns (question, A, B, C, D, answer), got 5")):
            instances("mmlu-debate", data_files=path)
