"""One agent's view of a multi-agent dialogue, in its model's own chat template.

Pure functions shared by every backend (transformers, vLLM, OpenAI-compatible servers), so the
same observation always becomes the same prompt whatever generates the reply.

## The view (`chat_messages`)
- `system`: the observation's `system_prompt` (the agent's role, question and private evidence).
- The agent's own earlier turns: `assistant`, the text exactly as the env recorded it.
- Every other agent's turn: `user`. With more than two agents it is prefixed with the speaker's
  name (`"Bob: ..."`), so the agent can tell its partners apart; with two agents the text is
  left bare: there is only one partner, and the name does harm. Measured with SmolLM2-135M
  (greedy): with the prefix it imitates it (its replies start with "Alice: ...") and answers
  "Bob: What is the capital of France?" in broken French, while the bare question gets "The
  capital of France is Paris."; on synth-hop-ia the bare form also gave the cleaner replies.
  The number of agents is `len(observation["agents"])` when the observation carries that key;
  otherwise it is the number of distinct names seen (the agent, the speaker, the transcript's
  speakers), which is exact for two agents and, for more, exact from each agent's second turn
  on (in the first round a later agent is not known yet). `ChatFormat.name_speakers`
  overrides the rule ("always"/"never").
- Consecutive messages of the same role are merged (joined by a blank line), so roles alternate
  as strict templates demand ("roles must alternate"). With round-robin turns only `user`
  messages ever merge (e.g. Alice's and Bob's turns in Carol's view); an agent never speaks
  twice in a row, so its own turns stay separate messages.
- When the agent speaks first (its first message would come before any `user` message), a
  fixed kickoff `user` message (`KICKOFF_MESSAGE`) is inserted right after the system message
  and kept on every later turn. Chat models expect a user message before the first reply, and
  keeping it makes the prompt of each turn a prefix of the prompt of its next turn.

## Token-id consistency
A reply is stored as *cleaned text* plus *the canonical token ids of that text*
(`clean_output`): the ids are `tokenizer.encode(text, add_special_tokens=False)`, so
`decode(ids) == text` and re-encoding the text gives the same ids. Cleaning cuts the reply at the
first end-of-turn token or stop string and strips surrounding whitespace. The generated ids are
kept unchanged whenever they already are that canonical encoding, which is the usual case; they
differ only when cleaning removed something or the sampler produced a non-canonical split of the
same text (`meta["reencoded"]` says so; `meta["generated_tokens"]` keeps the raw count).

Why canonical ids: the next prompt is built by rendering the template from *text* and encoding
it, and a model's chat template (ChatML here: `<|im_start|>assistant\\n{text}<|im_end|>`) puts
each message between a newline and a special token, which byte-level BPE never merges across.
So the ids of each earlier assistant turn appear verbatim in every later prompt of the same
agent (tested with the real SmolLM2 tokenizer in tests/agents/test_chat.py), and training, which
re-renders the same template, sees exactly the ids the env counted. Stripping leading whitespace
matters: a reply starting with a newline would merge with the template's newline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping, Sequence

__all__ = [
    "DEFAULT_CHAT_FORMAT",
    "KICKOFF_MESSAGE",
    "ChatFormat",
    "CleanedOutput",
    "chat_messages",
    "clean_output",
    "encode_text",
    "num_agents",
    "prompt_ids",
    "prompt_text",
]

#: The user message inserted when an agent speaks first (no user message before its reply).
#: Chosen by trying a few on SmolLM2-135M (greedy, synth-hop-ia): after "Let's begin. You speak
#: first." it said "I'm glad you're here..." on 6 of 6 questions; after this one it talked about
#: the question on all 6.
KICKOFF_MESSAGE = "Start by telling me what you know."

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True)
class ChatFormat:
    """How a transcript becomes chat messages.

    Args:
        kickoff (str, *optional*, defaults to `KICKOFF_MESSAGE`): the user message inserted
            when the agent speaks first.
        name_speakers (str, *optional*, defaults to `"auto"`): when to prefix other agents'
            messages with their name: "auto" (with more than two agents), "always" or "never".
        speaker_prefix (str, *optional*, defaults to `"{name}: "`): the prefix; `{name}` is the
            speaker capitalised (`bob` -> `Bob`).
        separator (str, *optional*, defaults to `"\\n\\n"`): joins merged same-role messages.
    """

    kickoff: str = KICKOFF_MESSAGE
    name_speakers: Literal["auto", "always", "never"] = "auto"
    speaker_prefix: str = "{name}: "
    separator: str = "\n\n"

    def __post_init__(self) -> None:
        if self.name_speakers not in ("auto", "always", "never"):
            raise ValueError(
                f"ChatFormat.name_speakers must be 'auto', 'always' or 'never', got {self.name_speakers!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"kickoff": self.kickoff, "name_speakers": self.name_speakers,
                "speaker_prefix": self.speaker_prefix, "separator": self.separator}


DEFAULT_CHAT_FORMAT = ChatFormat()


def chat_messages(observation: Mapping[str, Any], fmt: ChatFormat = DEFAULT_CHAT_FORMAT) -> list[dict[str, str]]:
    """The chat messages of `observation["agent"]`'s view of the dialogue (see the module doc).

    Args:
        observation: an env observation (keys `agent`, `system_prompt`, `transcript`; `agents`
            and `speaker` are used, when present, to count the agents).
        fmt: formatting options.

    Returns:
        `[{"role": ..., "content": ...}, ...]`, starting with the system message; roles after it
        alternate user/assistant, starting with user.
    """
    agent = observation["agent"]
    named = fmt.name_speakers == "always" or (fmt.name_speakers == "auto" and num_agents(observation) > 2)
    turns: list[tuple[Role, str]] = []
    for message in observation["transcript"]:
        speaker, text = message["speaker"], message["text"]
        if speaker == agent:
            turns.append(("assistant", text))
        else:
            turns.append(("user", fmt.speaker_prefix.format(name=speaker.capitalize()) + text if named else text))
    if not turns or turns[0][0] == "assistant":
        turns.insert(0, ("user", fmt.kickoff))
    messages = [{"role": "system", "content": observation["system_prompt"]}]
    for role, text in turns:
        if messages[-1]["role"] == role:
            messages[-1]["content"] += fmt.separator + text
        else:
            messages.append({"role": role, "content": text})
    return messages


def num_agents(observation: Mapping[str, Any]) -> int:
    """`len(observation["agents"])` if present, else the distinct names the observation shows."""
    agents = observation.get("agents")
    if agents:
        return len(agents)
    names = {observation["agent"], *(m["speaker"] for m in observation["transcript"])}
    if observation.get("speaker"):
        names.add(observation["speaker"])
    return len(names)


def prompt_text(observation: Mapping[str, Any], tokenizer: Any, fmt: ChatFormat = DEFAULT_CHAT_FORMAT) -> str:
    """The agent's view rendered with `tokenizer`'s chat template, ending with the generation prompt."""
    return tokenizer.apply_chat_template(chat_messages(observation, fmt), tokenize=False, add_generation_prompt=True)


def prompt_ids(observation: Mapping[str, Any], tokenizer: Any, fmt: ChatFormat = DEFAULT_CHAT_FORMAT) -> list[int]:
    """Token ids of `prompt_text`. The template already writes any BOS/special tokens, so none are added."""
    return encode_text(tokenizer, prompt_text(observation, tokenizer, fmt))


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """`text` to ids without added special tokens (the canonical encoding used everywhere here)."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


@dataclass(frozen=True)
class CleanedOutput:
    """A reply ready for the env: cleaned text, its canonical ids, and why generation stopped.

    `generated_tokens` is how many tokens the backend produced (before cleaning, without the
    end-of-turn token); `reencoded` is True when `token_ids` differ from the generated ids.
    """

    text: str
    token_ids: tuple[int, ...]
    finish_reason: Literal["stop", "length"]
    generated_tokens: int
    reencoded: bool


def clean_output(
    tokenizer: Any,
    generated_ids: Sequence[int],
    *,
    max_new_tokens: int,
    stop: Sequence[str] = (),
    stop_token_ids: Sequence[int] | None = None,
) -> CleanedOutput:
    """Turn a backend's raw generated ids into the stored reply (see "Token-id consistency").

    Args:
        tokenizer: the policy's tokenizer.
        generated_ids: the ids after the prompt, possibly with the end-of-turn token and padding.
        max_new_tokens: the generation limit, to tell "length" from "stop".
        stop: stop strings; the text is cut before the earliest one found.
        stop_token_ids: ids that end a turn (default: the tokenizer's EOS). Anything from the
            first of them on is dropped.

    Returns:
        The cleaned text, `encode_text(text)` as ids, `finish_reason` ("stop" when an
        end-of-turn token or stop string ended it or the output is shorter than the limit,
        "length" when it ran into `max_new_tokens`).
    """
    ends = set(stop_token_ids) if stop_token_ids is not None else {tokenizer.eos_token_id}
    ids = [int(i) for i in generated_ids]
    cut = next((k for k, i in enumerate(ids) if i in ends), None)
    ids = ids if cut is None else ids[:cut]
    raw = tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
    hits = [raw.find(s) for s in stop if s and s in raw]
    if hits:
        raw = raw[: min(hits)]
    stopped = cut is not None or bool(hits) or len(ids) < max_new_tokens
    text = raw.strip()
    token_ids = tuple(encode_text(tokenizer, text)) if text else ()
    return CleanedOutput(
        text=text,
        token_ids=token_ids,
        finish_reason="stop" if stopped else "length",
        generated_tokens=len(ids),
        reencoded=token_ids != tuple(ids),
    )
