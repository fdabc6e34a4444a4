#!/usr/bin/env python3
"""Plain text from unpacked Debian documentation packages, one document per page.

  extract.py man  LANG SRC_DIR OUT_DIR             translated man pages (groff rendering)
  extract.py help LANG SRC_DIR EN_DIR OUT_DIR      LibreOffice help pages (HTML)

Writes OUT_DIR/<source>-<page>.txt, UTF-8, paragraphs separated by blank lines, no markup.
Untranslated English is removed: a help paragraph equal to the English page's paragraph with
the same id is dropped; any paragraph is dropped when its words look English rather than LANG
(stop words) or, for non-Latin scripts, when it has no letter of LANG's script. A paragraph seen
before in this language (translator boilerplate, repeated captions) is kept only once.
Standard library only, plus groff for man pages. Deterministic: pages in sorted order.
"""
import gzip
import html
import html.parser
import os
import re
import subprocess
import sys

STOP = {
    "en": "the and of to is in for that this with be are or by not if on it as an which from can",
    "de": "der die das und ist nicht ein eine zu mit den von für auf im sich dem des wird werden",
    "fr": "le la les de des et est un une pour dans que qui sur pas ne du au par avec ce",
    "es": "el la los las de y que en un una es por para con no se del al lo como",
    "it": "il la di che e è un una per non con del della le gli si da in sono al",
    "nl": "de het een en van is dat niet in op te voor met zijn wordt door aan als",
    "pl": "i w nie na się z jest to do że jak o dla lub przez ze od",
    "pt": "o a os as de e que em um uma é para com não do da dos das se",
    "cs": "a v se na je že to s z do pro není jako nebo být jsou při",
    "tr": "ve bir bu için ile da de olarak çok daha veya olan gibi",
    "sv": "och i att det som en är på för med av den till inte",
    "ro": "și de la în cu o un pe care nu este să din pentru",
}
SCRIPT = {  # languages written in another script: a paragraph needs one of its letters
    "ru": r"[\u0400-\u04FF]", "uk": r"[\u0400-\u04FF]", "el": r"[\u0370-\u03FF\u1F00-\u1FFF]",
    "ja": r"[\u3040-\u30FF\u4E00-\u9FFF]", "zh": r"[\u4E00-\u9FFF]",
    "ko": r"[\uAC00-\uD7AF\u1100-\u11FF]",
}
WORD = re.compile(r"\w+", re.UNICODE)
STOP_SETS = {k: set(v.split()) for k, v in STOP.items()}


def foreign(lang, text):
    """Whether a paragraph is untranslated (English) text rather than LANG."""
    if lang in SCRIPT:
        return re.search(SCRIPT[lang], text) is None
    if lang == "en" or lang not in STOP_SETS:
        return False
    words = [w.lower() for w in WORD.findall(text)]
    english = sum(w in STOP_SETS["en"] for w in words)
    native = sum(w in STOP_SETS[lang] for w in words)
    return english >= 2 and english > native


class Seen:
    """Paragraphs already written for this language (boilerplate is kept once)."""

    def __init__(self):
        self.seen = set()

    def fresh(self, paragraph):
        if len(paragraph) < 40:
            return True
        if paragraph in self.seen:
            return False
        self.seen.add(paragraph)
        return True


def write(out_dir, name, paragraphs):
    text = "\n\n".join(paragraphs).strip()
    if len(text) < 200:  # stubs and redirects carry no text worth learning
        return 0
    path = os.path.join(out_dir, name + ".txt")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(text + "\n")
    os.replace(path + ".tmp", path)
    return 1


def man_pages(lang, src, out):
    seen, written = Seen(), 0
    pages = []
    for root, _, files in os.walk(src):
        pages += [os.path.join(root, f) for f in files if f.endswith(".gz")]
    for page in sorted(pages):
        if os.path.islink(page):
            continue
        with gzip.open(page, "rb") as f:
            source = f.read()
        if source.lstrip().startswith(b".so "):  # an alias of another page
            continue
        rendered = subprocess.run(
            ["groff", "-k", "-t", "-man", "-Tutf8", "-rLL=32000n", "-rHY=0", "-P-cbou"],
            input=source, capture_output=True).stdout.decode("utf-8", "replace")
        lines = rendered.split("\n")
        # The header line ("LS(1) ... LS(1)") and the footer (version, date) frame the page.
        lines = [re.sub(r"\s+", " ", l).strip() for l in lines]
        while lines and not lines[-1]:
            lines.pop()
        lines = lines[1:-1]
        paragraphs, current = [], []
        for l in lines + [""]:
            if l:
                current.append(l)
            elif current:
                paragraphs.append("\n".join(current))
                current = []
        kept = [p for p in paragraphs if "\ufffd" not in p and not foreign(lang, p) and seen.fresh(p)]
        name = os.path.basename(page)[:-3]
        written += write(out, "man-" + name, kept)
    return written


class HelpPage(html.parser.HTMLParser):
    """The headings and paragraphs of a help page's display area, by element id."""

    BLOCKS = {"p", "h1", "h2", "h3", "h4", "h5", "h6", "td", "li"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.blocks, self.current, self.depth, self.skip = [], None, 0, 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("script", "style", "noscript"):
            self.skip += 1
        if self.current is None and tag in self.BLOCKS and a.get("id"):
            self.current = [a["id"], [], tag, 0]
        elif self.current is not None and tag == self.current[2]:
            self.current[3] += 1

    def handle_endtag(self, tag):
        if tag in ("script", "style", "noscript"):
            self.skip = max(0, self.skip - 1)
        if self.current is not None and tag == self.current[2]:
            if self.current[3] == 0:
                text = re.sub(r"\s+", " ", "".join(self.current[1])).strip()
                if text:
                    self.blocks.append((self.current[0], text))
                self.current = None
            else:
                self.current[3] -= 1

    def handle_data(self, data):
        if self.current is not None and not self.skip:
            self.current[1].append(data)


def read_help(path):
    parser = HelpPage()
    with open(path, encoding="utf-8", errors="replace") as f:
        parser.feed(f.read())
    return parser.blocks


def help_pages(lang, src, en, out):
    seen, written = Seen(), 0
    pages = []
    for root, _, files in os.walk(src):
        pages += [os.path.join(root, f) for f in files if f.endswith(".html")]
    for page in sorted(pages):
        rel = os.path.relpath(page, src)
        english = {}
        en_page = os.path.join(en, rel)
        if lang != "en" and os.path.exists(en_page):
            english = dict(read_help(en_page))
        kept = [t for i, t in read_help(page)
                if english.get(i) != t and not foreign(lang, t) and seen.fresh(t)]
        written += write(out, "help-" + rel[:-5].replace(os.sep, "_"), kept)
    return written


def main(argv):
    if len(argv) < 5 or argv[1] not in ("man", "help") or (argv[1] == "help" and len(argv) < 6):
        sys.exit(__doc__)
    kind, lang = argv[1], argv[2]
    out = argv[-1]
    os.makedirs(out, exist_ok=True)
    n = man_pages(lang, argv[3], out) if kind == "man" else help_pages(lang, argv[3], argv[4], out)
    print(f"{lang}: {n} {kind} pages", flush=True)


if __name__ == "__main__":
    main(sys.argv)
