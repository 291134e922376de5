"""SentencePiece adapter: ``SentencePieceTokenizer``, ``GPTSentencePieceTokenizer``, ``Llama2Tokenizer``.

In megatron-core 0.16.1 the three names build the same class (``SentencePieceTokenizer`` library with
``legacy=False`` and no extra special tokens): ids are ``encode_as_ids(text)`` with no BOS or EOS added,
EOD is the model's ``eos_id`` and BOS its ``bos_id``. (Megatron-LM's older ``--legacy-tokenizer``
classes differed: Llama2Tokenizer prepended BOS, SentencePieceTokenizer added its own <EOD> id. Their
files are not what megatron-core 0.16.1 builds, and we follow megatron-core.)
"""

from __future__ import annotations

import os
import shutil
import tempfile

import sentencepiece

from corpus.core.errors import ConfigError
from corpus.core.optional import missing
from corpus.tokenizers.base import HuggingFaceForm, TextTokenizer, library_version
from corpus.tokenizers.config import TokenizerConfig, existing_file
from corpus.tokenizers.errors import NotExportable
from corpus.tokenizers.long_texts import SPACE_PREFIXED


class SentencePieceTextTokenizer(TextTokenizer):
    """``SentencePieceProcessor`` encoding batches with its multi-threaded batch call."""

    cut_rule = SPACE_PREFIXED  # whitespace becomes "▁" and a dummy "▁" starts the text

    def __init__(self, config: TokenizerConfig, path: str, threads: int) -> None:
        self.path = path
        self.threads = threads
        self.processor = sentencepiece.SentencePieceProcessor()
        try:
            self.processor.Load(path)
        except (OSError, RuntimeError) as error:
            raise ConfigError(f"--tokenizer-model {config.model}: not a SentencePiece model "
                              f"({error})") from None
        self.encoder_name = library_version("sentencepiece")
        super().__init__(config, self.processor.get_piece_size(),
                         eod=_defined(self.processor.eos_id()), bos=_defined(self.processor.bos_id()))

    def _encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self.processor.encode(texts, out_type=int, num_threads=self.threads)

    def decode(self, ids: list[int]) -> str:
        return self.processor.decode_ids(list(ids))

    def files(self) -> list[str]:
        return [self.path]

    def special_strings(self) -> list[str]:
        """Control and unknown pieces (``<s>``, ``</s>``, ``[INST]``...), which sentencepiece encodes in text
        as ordinary pieces, and user-defined pieces (``[REFERENCE_DOC_0]``...), which it emits whole.

        NOTE: sentencepiece's Python API does not name user-defined pieces; they are the pieces scored 0 that
        are none of the other kinds (its trainer scores meta pieces 0, learned pieces below 0). A learned
        piece taken for one only adds a probe."""
        processor = self.processor
        return [processor.IdToPiece(i) for i in range(processor.get_piece_size())
                if processor.IsControl(i) or processor.IsUnknown(i)
                or (processor.GetScore(i) == 0.0 and not (processor.IsByte(i) or processor.IsUnused(i)))]


def _defined(token_id: int) -> int | None:
    """SentencePiece reports an absent special token as -1."""
    return None if token_id < 0 else token_id


def build_sentencepiece(config: TokenizerConfig, threads: int | None = None) -> SentencePieceTextTokenizer:
    """Any of the three SentencePiece types from a ``.model`` file (``threads`` None: all cores)."""
    path = existing_file(config.model, "--tokenizer-model", config.type)
    return SentencePieceTextTokenizer(config, path, -1 if threads is None else threads)


def huggingface_form(tokenizer: SentencePieceTextTokenizer) -> HuggingFaceForm:
    """The model through transformers' converter (``TokenizersBackend``, which reads ``tokenizer.model`` and adds no
    BOS, as the data has none); control pieces in a text stay text, as sentencepiece encodes them."""
    if missing("transformers"):
        raise NotExportable("SentencePiece models are converted by transformers, which is not installed: pip "
                            "install transformers, then export again")
    from transformers import TokenizersBackend

    with tempfile.TemporaryDirectory() as folder:
        shutil.copyfile(tokenizer.path, os.path.join(folder, "tokenizer.model"))
        converted = TokenizersBackend.from_pretrained(folder).backend_tokenizer
    return HuggingFaceForm(converted, specials_as_text=True)
