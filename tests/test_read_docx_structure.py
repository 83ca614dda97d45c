"""Word's structures as stage 01 writes them (pipekit/read/wordml.py through pipekit/read/docx.py).

Each .docx here is written part by part into a zip (no python-docx needed), so each test
holds exactly the XML Word or pandoc writes for one structure, including those a
converter of our own tends to miss: nested lists, numbered vs bulleted, numbering that
comes from a style, merged cells, links as relationships and as fields, a heading by
outline level in a custom style, footnotes and their own links, tracked changes.
"""
from __future__ import annotations

import io
import re
import zipfile

import pytest

from pipekit.read.docx import read_docx
from pipekit.read.text import Unreadable

NS = ('xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main" '
      'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships" '
      'xmlns:wp="http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing"')
REL_NS = "http://schemas.openxmlformats.org/package/2006/relationships"
REL_TYPE = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/"

STYLES = {  # styleId: (name, extra pPr XML, basedOn)
    "Heading1": ("heading 1", "", None),
    "Heading2": ("Heading 2", "", None),
    "Heading8": ("heading 8", "", None),
    "Title": ("Title", "", None),
    "Chapter": ("Chapter Title", '<w:outlineLvl w:val="0"/>', None),
    "ChapterSub": ("Chapter Subtitle", "", "Chapter"),
    "BodyNote": ("Body Note", '<w:outlineLvl w:val="9"/>', None),
    "ListBullet": ("List Bullet", '<w:numPr><w:numId w:val="1"/></w:numPr>', None),
    "SourceCode": ("Source Code", "", None),
    "VerbatimChar": ("Verbatim Char", "", None),
    "StrongChar": ("Strong", "", None),
}


def styles_xml() -> str:
    out = []
    for sid, (name, ppr, based) in STYLES.items():
        kind = "character" if sid.endswith("Char") else "paragraph"
        base = f'<w:basedOn w:val="{based}"/>' if based else ""
        out.append(f'<w:style w:type="{kind}" w:styleId="{sid}"><w:name w:val="{name}"/>{base}'
                   f'<w:pPr>{ppr}</w:pPr></w:style>')
    return f'<w:styles {NS}>{"".join(out)}</w:styles>'


def numbering_xml() -> str:
    """numId 1: bullets at level 0, decimal at 1; numId 2: decimal at 0, bullets at 1."""
    def abstract(aid, formats):
        levels = "".join(f'<w:lvl w:ilvl="{i}"><w:numFmt w:val="{f}"/></w:lvl>' for i, f in enumerate(formats))
        return f'<w:abstractNum w:abstractNumId="{aid}">{levels}</w:abstractNum>'
    return (f'<w:numbering {NS}>{abstract(10, ["bullet", "decimal"])}{abstract(20, ["decimal", "bullet"])}'
            '<w:num w:numId="1"><w:abstractNumId w:val="10"/></w:num>'
            '<w:num w:numId="2"><w:abstractNumId w:val="20"/></w:num></w:numbering>')


def rels_xml(rels: dict[str, tuple[str, str, bool]]) -> str:
    items = "".join(f'<Relationship Id="{rid}" Type="{REL_TYPE}{kind}" Target="{target}"'
                    f'{" TargetMode=&quot;External&quot;".replace("&quot;", chr(34)) if external else ""}/>'
                    for rid, (kind, target, external) in rels.items())
    return f'<Relationships xmlns="{REL_NS}">{items}</Relationships>'


def make_docx(body: str, links: dict[str, str] | None = None, footnotes: str | None = None,
              footnote_links: dict[str, str] | None = None, extra_rels: dict | None = None) -> bytes:
    """A .docx whose document body is `body` (w:p / w:tbl XML), with our styles and numbering."""
    rels = {"rIdStyles": ("styles", "styles.xml", False), "rIdNum": ("numbering", "numbering.xml", False)}
    rels |= {rid: ("hyperlink", url, True) for rid, url in (links or {}).items()}
    rels |= extra_rels or {}
    parts = {
        "[Content_Types].xml": '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"/>',
        "_rels/.rels": rels_xml({"rId1": ("officeDocument", "word/document.xml", False)}),
        "word/document.xml": f"<w:document {NS}><w:body>{body}</w:body></w:document>",
        "word/styles.xml": styles_xml(),
        "word/numbering.xml": numbering_xml(),
    }
    if footnotes is not None:
        rels["rIdNotes"] = ("footnotes", "footnotes.xml", False)
        separators = ('<w:footnote w:type="separator" w:id="-1"><w:p><w:r><w:t>SEPARATOR</w:t></w:r></w:p></w:footnote>'
                      '<w:footnote w:type="continuationSeparator" w:id="0"><w:p><w:r><w:t>CONTINUED</w:t></w:r></w:p>'
                      '</w:footnote>')
        parts["word/footnotes.xml"] = f"<w:footnotes {NS}>{separators}{footnotes}</w:footnotes>"
        parts["word/_rels/footnotes.xml.rels"] = rels_xml(
            {rid: ("hyperlink", url, True) for rid, url in (footnote_links or {}).items()})
    parts["word/_rels/document.xml.rels"] = rels_xml(rels)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, xml in parts.items():
            z.writestr(name, '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>' + xml)
    return buf.getvalue()


def p(text: str, style: str | None = None, ppr: str = "", runs: str | None = None) -> str:
    pstyle = f'<w:pStyle w:val="{style}"/>' if style else ""
    return f"<w:p><w:pPr>{pstyle}{ppr}</w:pPr>{runs if runs is not None else r(text)}</w:p>"


def r(text: str, rpr: str = "") -> str:
    return f'<w:r><w:rPr>{rpr}</w:rPr><w:t xml:space="preserve">{text}</w:t></w:r>'


def item(text: str, num: int, level: int = 0) -> str:
    return p(text, ppr=f'<w:numPr><w:ilvl w:val="{level}"/><w:numId w:val="{num}"/></w:numPr>')


def markdown(body: str, **kw) -> str:
    return read_docx(make_docx(body, **kw))["text"]


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# --------------------------------------------------------------------------- headings


def test_headings_by_style_name_any_case_title_and_levels_past_six():
    md = markdown(p("Cover", "Title") + p("Intro", "Heading1") + p("Usage", "Heading2")
                  + p("Deep", "Heading8") + p("Body text."))
    assert lines(md) == ["# Cover", "# Intro", "## Usage", "###### Deep", "Body text."]


def test_a_custom_style_with_an_outline_level_is_a_heading_and_so_are_styles_based_on_it():
    md = markdown(p("Part one", "Chapter") + p("Inherited", "ChapterSub") + p("text")
                  + p("Direct level", ppr='<w:outlineLvl w:val="2"/>')
                  + p("Body level nine", "BodyNote") + p("Also body", ppr='<w:outlineLvl w:val="9"/>'))
    assert lines(md) == ["# Part one", "# Inherited", "text", "### Direct level", "Body level nine", "Also body"]


def test_a_heading_style_styles_xml_does_not_define_is_known_by_its_id():
    md = markdown(p("Known by id", "Heading3") + p("Unknown style", "Fancy") + p("x"))
    assert lines(md) == ["### Known by id", "Unknown style", "x"]


# --------------------------------------------------------------------------- lists


def test_bulleted_and_numbered_lists_nest_by_level():
    md = markdown(item("fruit", 1) + item("apple", 1, 1) + item("pear", 1, 1) + item("veg", 1)
                  + p("between") + item("first", 2) + item("sub", 2, 1) + item("second", 2))
    got = lines(md)
    assert got[0] == "- fruit" and got[3] == "- veg"
    # numId 1's level 1 is decimal: numbered, nested under "fruit" (indented), not a sibling.
    assert re.fullmatch(r"\s+1\. apple", got[1]) and re.fullmatch(r"\s+2\. pear", got[2])
    assert got[4] == "between"
    assert got[5] == "1. first" and re.fullmatch(r"\s+[-*+] sub", got[6]) and got[7] == "2. second"


def test_numbering_from_the_paragraph_style_and_numid_zero_is_no_list():
    md = markdown(p("styled item", "ListBullet") + p("also styled", "ListBullet")
                  + p("numbering removed", ppr='<w:numPr><w:ilvl w:val="0"/><w:numId w:val="0"/></w:numPr>')
                  + p("undefined numbering", ppr='<w:numPr><w:ilvl w:val="0"/><w:numId w:val="77"/></w:numPr>'))
    assert lines(md) == ["- styled item", "- also styled", "numbering removed", "undefined numbering"]


def test_an_item_whose_parent_list_was_closed_keeps_its_depth():
    # pandoc: a code block inside a level-0 item ends the list; the next level-1 item follows.
    code = p("", "SourceCode", runs=r("$ make"))
    got = lines(markdown(item("Create", 1) + item("Linux", 1, 1) + code + item("Windows", 1, 1)))
    assert got[:2] == ["- Create", "  1. Linux"]
    assert re.fullmatch(r"- +1\. Windows", got[-1])  # nested under an empty item, not level 0


def test_a_change_of_kind_at_one_level_starts_a_new_list():
    got = lines(markdown(item("bullet", 1) + item("number", 2)))
    assert got[0] == "- bullet" and got[1] == "1. number"


# --------------------------------------------------------------------------- tables


def tc(text: str, tcpr: str = "") -> str:
    return f"<w:tc><w:tcPr>{tcpr}</w:tcPr>{p(text)}</w:tc>"


def test_table_cells_with_merges_keep_every_cell_once():
    header = '<w:tr><w:trPr><w:tblHeader/></w:trPr>' + tc("Name") + tc("Kind") + tc("Size") + "</w:tr>"
    row1 = "<w:tr>" + tc("alpha", '<w:vMerge w:val="restart"/>') + tc("wide span", '<w:gridSpan w:val="2"/>') + "</w:tr>"
    row2 = "<w:tr>" + tc("", "<w:vMerge/>") + tc("leaf") + tc("3 kB") + "</w:tr>"
    md = markdown(f"<w:tbl>{header}{row1}{row2}</w:tbl>" + p("after"))
    rows = [line for line in lines(md) if line.startswith("|")]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows if not set(row) <= set("|-: ")]
    assert cells[0] == ["Name", "Kind", "Size"]
    flat = [c for row in cells for c in row]
    assert flat.count("alpha") == 1 and flat.count("wide span") == 1
    assert "leaf" in flat and "3 kB" in flat
    assert lines(md)[-1] == "after"


# --------------------------------------------------------------------------- links


def test_hyperlinks_by_relationship_anchor_and_field():
    body = (
        '<w:p><w:r><w:t xml:space="preserve">See </w:t></w:r>'
        '<w:hyperlink r:id="rIdLink"><w:r><w:t>the docs</w:t></w:r></w:hyperlink>'
        '<w:r><w:t xml:space="preserve"> or </w:t></w:r>'
        '<w:hyperlink w:anchor="usage"><w:r><w:t>usage</w:t></w:r></w:hyperlink>'
        '<w:r><w:t xml:space="preserve"> or </w:t></w:r>'
        '<w:r><w:fldChar w:fldCharType="begin"/></w:r>'
        '<w:r><w:instrText xml:space="preserve"> HYPERLINK "https://field.example/x" </w:instrText></w:r>'
        '<w:r><w:fldChar w:fldCharType="separate"/></w:r>'
        '<w:r><w:t>a field</w:t></w:r>'
        '<w:r><w:fldChar w:fldCharType="end"/></w:r>'
        '<w:r><w:t xml:space="preserve"> and </w:t></w:r>'
        '<w:fldSimple w:instr=" HYPERLINK &quot;https://simple.example/&quot; "><w:r><w:t>simple</w:t></w:r></w:fldSimple>'
        '<w:r><w:t>.</w:t></w:r></w:p>')
    md = markdown(body, links={"rIdLink": "https://docs.example/guide"})
    assert md.strip() == ("See [the docs](https://docs.example/guide) or usage or "
                          "[a field](https://field.example/x) and [simple](https://simple.example/).")
    assert "HYPERLINK" not in md


def test_a_link_around_bold_and_code_is_one_link_and_bold_runs_merge():
    runs = ('<w:hyperlink r:id="rIdLink">' + r("call ") + r("run()", '<w:rStyle w:val="VerbatimChar"/>')
            + "</w:hyperlink>" + r(" now ") + r("bo", '<w:rStyle w:val="StrongChar"/>') + r("ld", "<w:b/>") + r(" not", '<w:b w:val="0"/>'))
    md = markdown(p("", runs=runs), links={"rIdLink": "https://x.example/"})
    assert md.strip() == "[call `run()`](https://x.example/) now **bold** not"


# --------------------------------------------------------------------------- notes, code, changes


def test_footnotes_are_numbered_where_they_stand_and_listed_at_the_end_with_their_links():
    body = p("", runs=r("Claim") + '<w:r><w:footnoteReference w:id="5"/></w:r>' + r(" and more."))
    note = ('<w:footnote w:id="5"><w:p><w:r><w:t xml:space="preserve">Source: </w:t></w:r>'
            '<w:hyperlink r:id="rIdN"><w:r><w:t>the paper</w:t></w:r></w:hyperlink></w:p></w:footnote>')
    md = markdown(body, footnotes=note, footnote_links={"rIdN": "https://paper.example/"})
    got = lines(md)
    assert re.fullmatch(r"Claim\\?\[1\\?\] and more\.", got[0])
    assert got[-1] == "1. Source: [the paper](https://paper.example/)"
    assert "SEPARATOR" not in md and "CONTINUED" not in md


def test_code_paragraphs_are_one_fenced_block_and_tracked_changes_read_as_accepted():
    code = p("", "SourceCode", runs=r("def f():")) + p("", "SourceCode", runs=r("    return 1"))
    changed = ('<w:p><w:r><w:t xml:space="preserve">kept </w:t></w:r>'
               '<w:del w:id="1" w:author="a"><w:r><w:delText>deleted</w:delText></w:r></w:del>'
               '<w:ins w:id="2" w:author="a"><w:r><w:t>inserted</w:t></w:r></w:ins></w:p>')
    md = markdown(code + changed)
    assert "```\ndef f():\n    return 1\n```" in md
    assert lines(md)[-1] == "kept inserted"


def test_an_external_image_or_link_target_is_never_opened(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-WORD-9d1", encoding="utf-8")
    # An image linked, not embedded (r:link): Word's "link to file", a path on the author's disk.
    body = ('<w:p><w:r><w:drawing><wp:inline><wp:docPr id="1" name="pic" descr="a diagram"/>'
            '<a:graphic xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main"><a:graphicData>'
            '<pic:pic xmlns:pic="http://schemas.openxmlformats.org/drawingml/2006/picture"><pic:blipFill>'
            '<a:blip r:link="rIdImg"/></pic:blipFill></pic:pic></a:graphicData></a:graphic>'
            '</wp:inline></w:drawing></w:r></w:p>')
    data = make_docx(body, extra_rels={"rIdImg": ("image", secret.as_uri(), True)})
    md = read_docx(data)["text"]
    assert "a diagram" in md and "SECRET-WORD" not in md


def test_a_document_part_the_package_lacks_is_an_unreadable_row():
    data = make_docx(p("x"))
    buf = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as zin, zipfile.ZipFile(buf, "w") as zout:
        for info in zin.infolist():
            if info.filename != "word/document.xml":
                zout.writestr(info, zin.read(info))
    with pytest.raises(Unreadable, match="word/document.xml is missing"):
        read_docx(buf.getvalue())


def test_a_field_never_closed_hides_nothing_after_it():
    # A damaged file: a field begins, its instruction is never separated or ended.
    opened = ('<w:p><w:r><w:fldChar w:fldCharType="begin"/></w:r>'
              '<w:r><w:instrText xml:space="preserve"> PAGE </w:instrText></w:r></w:p>')
    md = markdown(opened + p("still here") + p("Later", "Heading1"))
    assert lines(md) == ["still here", "# Later"]


def test_documents_with_different_styles_parts_are_never_confused(monkeypatch):
    # The styles part is read once per distinct content (docx.py caches it): a second
    # document whose "Heading1" id names another style must not inherit the first's.
    first = markdown(p("Intro", "Heading1"))
    monkeypatch.setitem(STYLES, "Heading1", ("Plain Custom", "", None))
    second = markdown(p("Intro", "Heading1"))
    assert (first.strip(), second.strip()) == ("# Intro", "Intro")
