"""Small real documents for the upload tests, made with the writers of pypdf and python-docx.

The rule they keep: every file is a valid file of its type, written by a maintained library
(or deliberately broken in one named way), so the tests exercise the parsers as users' files
would.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Sequence

import docx
from pypdf import PdfWriter
from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject


def make_pdf(pages: Sequence[str], *, password: str | None = None, owner: str = "") -> bytes:
    """A PDF with one page per text (Helvetica, one text line per line); encrypted with
    `password` as its user password if given (an empty one opens without a password)."""
    writer = PdfWriter()
    for text in pages:
        page = writer.add_blank_page(612, 792)
        font = DictionaryObject(
            {
                NameObject("/Type"): NameObject("/Font"),
                NameObject("/Subtype"): NameObject("/Type1"),
                NameObject("/BaseFont"): NameObject("/Helvetica"),
            }
        )
        fonts = DictionaryObject({NameObject("/F1"): writer._add_object(font)})
        page[NameObject("/Resources")] = DictionaryObject({NameObject("/Font"): fonts})
        ops = []
        for n, line in enumerate(text.split("\n")):
            escaped = line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
            ops.append(f"BT /F1 12 Tf 72 {720 - 16 * n} Td ({escaped}) Tj ET")
        stream = DecodedStreamObject()
        stream.set_data("\n".join(ops).encode("latin-1"))
        page[NameObject("/Contents")] = writer._add_object(stream)
    if password is not None:
        writer.encrypt(password, owner or "owner-password", algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def make_docx(paragraphs: Sequence[str], table: Sequence[Sequence[str]] = ()) -> bytes:
    """A DOCX with the paragraphs, then a table of the given rows (if any), then "The end."."""
    document = docx.Document()
    for text in paragraphs:
        document.add_paragraph(text)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, text in enumerate(row):
                grid.cell(r, c).text = text
    document.add_paragraph("The end.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def inflating_docx(declared: int) -> bytes:
    """A zip that looks like a DOCX and declares a part of `declared` bytes uncompressed: a
    zip bomb's directory (the part itself is small; the declared size is what is checked)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", b"\0" * (1 << 16))
    data = bytearray(out.getvalue())
    # Patch the central directory's uncompressed size of word/document.xml.
    central = data.rfind(b"PK\x01\x02")
    while central >= 0:
        name_length = int.from_bytes(data[central + 28 : central + 30], "little")
        name = bytes(data[central + 46 : central + 46 + name_length])
        if name == b"word/document.xml":
            data[central + 24 : central + 28] = declared.to_bytes(4, "little")
            break
        central = data.rfind(b"PK\x01\x02", 0, central)
    return bytes(data)
