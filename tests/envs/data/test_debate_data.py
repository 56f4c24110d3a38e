"""GSM8K, MATH, ARC-Challenge and MMLU loaders: every format (the fixtures in optima_envs/test/fixtures),
gold answers, ids, errors."""

import csv
import re

import pytest

import optima_envs
from optima_envs.errors import ConfigError, DataError
from optima_envs.test import FIXTURES
from tests.envs.data.fixtures import read_jsonl_file, write_jsonl

GSM8K = FIXTURES / "gsm8k"
MATH = FIXTURES / "math"
ARC = FIXTURES / "arc_challenge"
MMLU = FIXTURES / "mmlu"


def instances(env_id, **kwargs):
    return optima_envs.make(env_id, **kwargs).task.source.instances


class TestGSM8K:
    def test_release_test_split(self):
        loaded = instances("gsm8k-debate", data_dir=GSM8K)
        assert len(loaded) == 6
        first = loaded[0]
        assert (first.instance_id, first.gold) == ("test-0", "18")
        assert first.question.startswith("Priya picks 30 strawberries in the morning.")
        assert first.meta["solution"].endswith("#### 18")
        assert (loaded[2].instance_id, loaded[2].gold) == ("test-2", "1000")  # "#### 1,000"
        assert [i.instance_id for i in instances("gsm8k-debate", data_dir=GSM8K, split="train")] == \
            ["train-0", "train-1", "train-2"]

    def test_thousands_separator_and_sign(self, tmp_path):
        path = write_jsonl(tmp_path / "train.jsonl", [{"question": "q1", "answer": "so\n#### 1,250"},
                                                      {"question": "q2", "answer": "so\n#### -3"}])
        assert [i.gold for i in instances("gsm8k-debate", data_dir=tmp_path, split="train")] == ["1250", "-3"]
        assert [i.instance_id for i in instances("gsm8k-debate", data_files=path)] == ["train-0", "train-1"]

    def test_hub_parquet_layout_holds_the_same_problems(self, tmp_path):
        pa = pytest.importorskip("pyarrow")
        pq = pytest.importorskip("pyarrow.parquet")
        rows = read_jsonl_file(GSM8K / "test.jsonl")  # the hub's openai/gsm8k rows have the release's fields
        (tmp_path / "main").mkdir()
        pq.write_table(pa.Table.from_pylist(rows), tmp_path / "main" / "test-00000-of-00001.parquet")
        hub, release = instances("gsm8k-debate", data_dir=tmp_path), instances("gsm8k-debate", data_dir=GSM8K)
        assert [(i.question, i.gold, i.meta) for i in hub] == [(i.question, i.gold, i.meta) for i in release]

    @pytest.mark.parametrize("answer, message", [
        ("no marker", "field 'answer' has no '#### <number>' line"),
        ("x\n#### eighteen", "the final answer after '####' is not a number: 'eighteen'"),
    ])
    def test_bad_answers(self, tmp_path, answer, message):
        path = write_jsonl(tmp_path / "test.jsonl", [{"question": "q", "answer": answer}])
        with pytest.raises(DataError, match=re.escape(f"{path}:1: {message}")):
            instances("gsm8k-debate", data_files=path)


class TestMATH:
    def test_jsonl_test_split_gold_is_last_box(self):
        loaded = instances("math-debate", data_files=MATH / "MATH_test_5000.jsonl")
        assert len(loaded) == 7
        assert (loaded[0].instance_id, loaded[0].gold, loaded[0].meta["level"]) == ("MATH_test_5000-0", "2", "Level 2")
        assert (loaded[1].instance_id, loaded[1].gold) == ("MATH_test_5000-1", "\\frac{1}{5,\\!525}")
        assert loaded[1].meta["type"] == "Counting & Probability"

    def test_math500_uses_answer_and_unique_id(self):
        loaded = instances("math-debate", data_dir=MATH, subset="math500")
        first = loaded[0]
        assert len(loaded) == 5 and first.instance_id == "test/precalculus/514.json"
        assert first.gold == "\\left( 5, \\frac{\\pi}{2} \\right)"
        assert (first.meta["subject"], first.meta["level"]) == ("Precalculus", 2)

    def test_release_per_problem_files(self):
        # MATH/test/geometry/3.json boxes the hypotenuse first, then the perimeter it asks for.
        for data_dir in (MATH, MATH / "MATH"):
            loaded = instances("math-debate", data_dir=data_dir)
            assert [(i.instance_id, i.gold) for i in loaded] == [("test/algebra/12.json", "\\frac{1}{2}"),
                                                               ("test/geometry/3.json", "12")]
        train = instances("math-debate", data_dir=MATH, split="train")
        assert [(i.instance_id, i.gold, i.meta["type"]) for i in train] == [
            ("train/algebra/40.json", "7", "Algebra"), ("train/prealgebra/7.json", "12", "Prealgebra")]

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
        restructured = instances("arc-debate", data_files=ARC / "restructured/arc_challenge_test.jsonl")
        assert len(original) == 6 and len(restructured) == 6
        assert all(original[i.instance_id] == i for i in restructured)
        assert {len(i.choices) for i in restructured} == {3, 4, 5}

    def test_hub_rows_map_digit_labels_to_letters(self):
        hub = {i.instance_id: i for i in instances("arc-debate", data_files=ARC / "hub/validation.jsonl")}
        dev = instances("arc-debate", data_dir=ARC, split="dev")
        assert len(dev) == 3 and len(hub) == 5
        assert all(hub[i.instance_id].choices == i.choices and hub[i.instance_id].gold == i.gold for i in dev)
        digits = [i for i in hub.values() if i.meta["original_labels"][0] == "1"]
        assert [i.instance_id for i in digits] == ["NYSEDREGENTS_2099_8_31"] and digits[0].gold == "B"
        assert all(label in "ABCDE" for i in digits for label, _ in i.choices)

    def test_known_item(self):
        first = instances("arc-debate", data_dir=ARC)[0]
        assert first.instance_id == "Mercury_9000105" and first.gold == "C"
        assert first.choices[2] == ("C", "There is less friction on the wooden floor.")

    def test_digit_labels_in_original_format(self):
        (item,) = [i for i in instances("arc-debate", data_files=ARC / "ARC-Challenge/ARC-Challenge-Test.jsonl")
                   if i.meta["original_labels"] == ("1", "2", "3", "4")]
        assert item.instance_id == "NYSEDREGENTS_2099_8_22"
        assert item.gold == "C" and item.choices == (("A", "condensation"), ("B", "freezing"), ("C", "evaporation"),
                                                     ("D", "melting"))

    def test_answer_key_not_an_option(self, tmp_path):
        row = {"id": "X_1", "question": "s?", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "E"}
        path = write_jsonl(tmp_path / "validation.jsonl", [row])
        with pytest.raises(DataError, match=re.escape(f"{path}:1: the answer key 'E' is not one of the labels ['A', 'B']")):
            instances("arc-debate", data_files=path)


class TestMMLU:
    @pytest.mark.parametrize("split, count", [("test", 9), ("val", 6), ("dev", 6)])
    def test_release_splits(self, split, count):
        loaded = instances("mmlu-debate", data_dir=MMLU, split=split)
        assert len(loaded) == count and len({i.meta["subject"] for i in loaded}) == 3

    def test_subject_and_ids_from_file_names(self):
        first = instances("mmlu-debate", data_dir=MMLU, subjects="anatomy")[0]
        row = next(csv.reader((MMLU / "test/anatomy_test.csv").open(newline="", encoding="utf-8")))
        assert (first.instance_id, first.meta["subject"], first.gold) == ("anatomy_test-0", "anatomy", row[5])
        assert first.question == row[0] and first.choices == tuple(zip("ABCD", row[1:5]))

    @pytest.mark.parametrize("split", ["test", "validation", "dev"])
    def test_hub_rows_equal_csv_rows(self, split):
        assert instances("mmlu-debate", data_dir=MMLU / "hub", split=split) == \
            instances("mmlu-debate", data_dir=MMLU, split=split)

    def test_hub_rows_of_some_subjects(self, tmp_path):
        subjects = ["college_physics", "formal_logic"]
        rows = []
        for subject in subjects:
            for record in csv.reader((MMLU / f"val/{subject}_val.csv").open(newline="", encoding="utf-8")):
                rows.append({"question": record[0], "subject": subject, "choices": record[1:5],
                             "answer": "ABCD".index(record[5])})
        write_jsonl(tmp_path / "validation.jsonl", rows)
        assert instances("mmlu-debate", data_dir=tmp_path, split="validation") == \
            instances("mmlu-debate", data_dir=MMLU, split="validation", subjects=subjects)
        assert len(instances("mmlu-debate", data_dir=tmp_path, split="validation", subjects=["formal_logic"])) == 2

    def test_multiline_question_and_lookalike_options(self):
        item = next(i for i in instances("mmlu-debate", data_dir=MMLU, subjects="formal_logic")
                    if i.instance_id == "formal_logic_test-1")
        assert item.question.splitlines() == ["Which of the following propositions is an immediate (one-step) "
                                              "consequence in PL of the given premises?", "(C ∨ D) ⊃ E", "C ∨ D"]
        assert item.choices == (("A", "C"), ("B", "~~C"), ("C", "E"), ("D", "~E")) and item.gold == "C"

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
