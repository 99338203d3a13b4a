"""Text from an uploaded file: which files are read, how, and within which bounds.

The rules:
- A file is read by what its name says it is (its extension), else by the media type the
  client gave, else as UTF-8 text if it reads as such: text-like files (txt, md, csv, json,
  source code, ...) are decoded as UTF-8 (a UTF-8 or UTF-16 byte-order mark is honoured);
  PDF through pypdf; DOCX through python-docx. Anything else (images, archives, legacy Office
  files) is `unsupported_type`.
- Every bound holds before the work it bounds: the file's bytes (`max_bytes`), a PDF's pages
  (`MAX_PDF_PAGES`), a DOCX's parts and their uncompressed sizes as its zip directory declares
  them (`MAX_DOCX_PARTS`, `MAX_DOCX_UNCOMPRESSED`; zipfile never inflates a part past its
  declared size), and the extracted characters (`max_chars`: extraction stops as soon as
  they pass it).
- A file that does not read (not UTF-8, damaged, encrypted, no text in it) is refused with
  our own sentence; a parser's message is never shown or logged (it can quote the file).
- Extracted text has one line ending (`\\n`) and no NUL or other control characters but tab
  and newline, so it reads like typed text.
"""

from __future__ import annotations

import io
import logging
import re
import zipfile
from dataclasses import dataclass
from typing import ClassVar, Literal

from holdback.errors import HoldbackError, describe

log = logging.getLogger(__name__)
# pypdf logs what it repairs in a damaged file, sometimes quoting the file; not in our logs.
logging.getLogger("pypdf").setLevel(logging.CRITICAL + 1)

Kind = Literal["text", "pdf", "docx"]

MAX_PDF_PAGES = 2_000
MAX_DOCX_PARTS = 2_000
MAX_DOCX_UNCOMPRESSED = 64 * 1024 * 1024  # bytes, all parts together, as declared
MAX_NAME_CHARS = 200

PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"

_MARKUP = {
    "md": "text/markdown",
    "markdown": "text/markdown",
    "csv": "text/csv",
    "tsv": "text/tab-separated-values",
    "json": "application/json",
    "jsonl": "application/jsonl",
    "ndjson": "application/jsonl",
    "xml": "application/xml",
    "html": "text/html",
    "htm": "text/html",
    "css": "text/css",
    "yaml": "application/yaml",
    "yml": "application/yaml",
    "toml": "application/toml",
    "svg": "image/svg+xml",
}
_PLAIN = (
    "txt text log ini cfg conf config env properties rst adoc tex bib srt vtt "
    "py pyi ipynb js mjs cjs jsx ts tsx vue svelte java kt kts scala groovy gradle c h cc cpp "
    "cxx hpp hh cs fs go rs swift m mm rb php pl pm lua r jl dart ex exs erl hs ml clj "
    "sh bash zsh fish ps1 bat cmd sql graphql proto tf hcl nix cmake mk make diff patch "
    "dockerfile gitignore editorconfig lock"
)
_NAMES = (  # text files that have no extension
    "readme license licence copying notice changelog authors makefile dockerfile "
    "gemfile rakefile procfile vagrantfile jenkinsfile"
)
TEXT_EXTENSIONS: dict[str, str] = {**dict.fromkeys(_PLAIN.split(), "text/plain"), **_MARKUP}
TEXT_NAMES = frozenset(_NAMES.split())
TEXT_MEDIA_TYPES = frozenset(
    [
        "application/json",
        "application/xml",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/javascript",
        "application/x-sh",
        "application/sql",
        "application/jsonl",
        "application/x-ndjson",
    ]
)

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


class UploadRefusedError(HoldbackError):
    """A file that is not stored; `status` is the HTTP status it is refused with."""

    status: ClassVar[int] = 400


class UploadTooLargeError(UploadRefusedError):
    """The file has more bytes than the server accepts (`HOLDBACK_MAX_UPLOAD_BYTES`)."""

    code = "upload_too_large"
    status = 413


class UploadTooLongError(UploadRefusedError):
    """The file's text is longer than the server accepts (characters, or a PDF's pages)."""

    code = "upload_too_long"
    status = 413


class UnsupportedTypeError(UploadRefusedError):
    """The file is not of a type holdback reads text from."""

    code = "unsupported_type"
    status = 415


class UnreadableFileError(UploadRefusedError):
    """The file is not what it says: not UTF-8 text, or a damaged PDF or DOCX."""

    code = "unreadable_file"


class EncryptedFileError(UnreadableFileError):
    """The file is encrypted (a password-protected PDF or DOCX)."""

    code = "encrypted_file"


class EmptyFileError(UnreadableFileError):
    """The file holds no text (an empty file, or a PDF of scanned images)."""

    code = "empty_file"


@dataclass(frozen=True, slots=True)
class Extracted:
    text: str
    media_type: str

    def __repr__(self) -> str:  # never the text
        return f"Extracted(chars={len(self.text)}, media_type={self.media_type!r})"


def clean_name(filename: str | None) -> str:
    """A file's name as it is shown and composed: its last path component, one line, no
    control characters, at most `MAX_NAME_CHARS` (the extension kept)."""
    name = (filename or "").replace("\\", "/").rsplit("/", 1)[-1]
    name = " ".join(_CONTROL.sub(" ", name).split())
    if len(name) > MAX_NAME_CHARS:
        _, dot, ext = name.rpartition(".")
        keep = f".{ext}" if dot and len(ext) <= 16 else ""
        name = name[: MAX_NAME_CHARS - len(keep)] + keep
    return name or "document"


def kind_of(name: str, media_type: str | None) -> tuple[Kind, str] | None:
    """How a file is read and the media type recorded for it; None when the name or the media
    type says it is of a type holdback does not read. `("text", "")` means: try it as text."""
    lowered = name.lower()
    stem, dot, ext = lowered.rpartition(".")
    declared = (media_type or "").split(";", 1)[0].strip().lower()
    if dot and stem:
        if ext == "pdf":
            return "pdf", PDF
        if ext == "docx":
            return "docx", DOCX
        if ext in TEXT_EXTENSIONS:
            return "text", TEXT_EXTENSIONS[ext]
    elif lowered.lstrip(".") in TEXT_NAMES or lowered.lstrip(".") in TEXT_EXTENSIONS:
        return "text", "text/plain"  # README, Makefile, .gitignore, .env
    if declared == PDF:
        return "pdf", PDF
    if declared == DOCX:
        return "docx", DOCX
    if declared.startswith("text/") or declared in TEXT_MEDIA_TYPES:
        return "text", declared
    if dot and stem:
        return None  # an extension we do not read (.png, .zip, .doc, .xlsx)
    if declared in ("", "application/octet-stream"):
        return "text", ""  # no extension and no type: text if it reads as text
    return None


def extract(data: bytes, name: str, media_type: str | None, *, max_chars: int) -> Extracted:
    """The text of a file, or an `UploadRefusedError` that says why not."""
    found = kind_of(name, media_type)
    if found is None:
        raise UnsupportedTypeError("the file is not of a type holdback reads")
    kind, recorded = found
    if kind == "pdf":
        text = _pdf(data, max_chars)
    elif kind == "docx":
        text = _docx(data, max_chars)
    else:
        try:
            text = _text(data)
        except UnreadableFileError:
            if not recorded:  # nothing said it was text
                raise UnsupportedTypeError("the file is not text") from None
            raise
        recorded = recorded or "text/plain"
    text = _tidy(text)
    if len(text) > max_chars:
        raise UploadTooLongError(f"the text is longer than {max_chars} characters")
    if not text.strip():
        raise EmptyFileError("the file holds no text")
    return Extracted(text, recorded)


def _tidy(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROL.sub("", text)


def _text(data: bytes) -> str:
    try:
        if data.startswith((b"\xff\xfe", b"\xfe\xff")):
            text = data.decode("utf-16")
        else:
            text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise UnreadableFileError("the file is not UTF-8 text") from None
    if "\x00" in text:
        raise UnreadableFileError("the file holds NUL characters: it is not text")
    return text


def _pdf(data: bytes, max_chars: int) -> str:
    from pypdf import PasswordType, PdfReader

    if b"%PDF-" not in data[:1024]:
        raise UnreadableFileError("the file is not a PDF")
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and reader.decrypt("") == PasswordType.NOT_DECRYPTED:
            raise EncryptedFileError("the PDF is encrypted")
        if len(reader.pages) > MAX_PDF_PAGES:
            raise UploadTooLongError(f"the PDF has more than {MAX_PDF_PAGES} pages")
        pages: list[str] = []
        total = 0
        for page in reader.pages:
            text = page.extract_text() or ""
            pages.append(text)
            total += len(text)
            if total > max_chars:
                raise UploadTooLongError(f"the text is longer than {max_chars} characters")
    except UploadRefusedError:
        raise
    except Exception as exc:  # pypdf raises many types on damaged files; none is shown
        log.info("a PDF did not read: %s", describe(exc))
        raise UnreadableFileError("the PDF is damaged or not a PDF") from None
    return "\n\n".join(p.strip("\n") for p in pages)


def _docx(data: bytes, max_chars: int) -> str:
    if data.startswith(b"\xd0\xcf\x11\xe0"):  # an OLE container: an encrypted OOXML file
        raise EncryptedFileError("the DOCX is encrypted")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            parts = archive.infolist()
            if len(parts) > MAX_DOCX_PARTS:
                raise UnreadableFileError("the DOCX has too many parts")
            if sum(p.file_size for p in parts) > MAX_DOCX_UNCOMPRESSED:
                raise UnreadableFileError("the DOCX inflates past the bound")
            if "word/document.xml" not in {p.filename for p in parts}:
                raise UnreadableFileError("the file is not a DOCX")
    except zipfile.BadZipFile:
        raise UnreadableFileError("the file is not a DOCX") from None
    try:
        return _docx_text(data, max_chars)
    except UploadRefusedError:
        raise
    except Exception as exc:  # python-docx and lxml raise many types on damaged files
        log.info("a DOCX did not read: %s", describe(exc))
        raise UnreadableFileError("the DOCX is damaged") from None


def _docx_text(data: bytes, max_chars: int) -> str:
    """Paragraphs and tables in document order; a table row's cells joined by ` | `."""
    import docx
    from docx.table import Table

    document = docx.Document(io.BytesIO(data))
    lines: list[str] = []
    total = 0
    for block in document.iter_inner_content():
        if isinstance(block, Table):
            for row in block.rows:
                cells: list[str] = []
                for cell in row.cells:  # a merged cell is repeated: once is enough
                    text = " ".join(cell.text.split("\n"))
                    if not cells or cells[-1] != text:
                        cells.append(text)
                lines.append(" | ".join(cells))
                total += len(lines[-1])
        else:
            lines.append(block.text)
            total += len(lines[-1])
        if total > max_chars:
            raise UploadTooLongError(f"the text is longer than {max_chars} characters")
    return "\n".join(lines)
