#!/usr/bin/env bash
# The built-in multilingual text corpus, from Debian packages alone (docs/text.md):
# translated man pages (manpages-*) and LibreOffice help (libreoffice-help-*), fetched with
# `apt-get download`, unpacked with `dpkg-deb -x` (nothing is installed), converted to plain
# text by extract.py, one directory of documents per language.
#
#   scripts/corpus/multilingual.sh OUT_DIR [CACHE_DIR]
#
# OUT_DIR/<lang>/*.txt is the input of `lol corpus build`; OUT_DIR/packages.txt lists the exact
# package versions the text came from (the same versions give byte-identical text). Downloads
# are kept in CACHE_DIR (default ~/.cache/lol/debs), so a rerun needs no network.
set -euo pipefail

out="${1:?usage: multilingual.sh OUT_DIR [CACHE_DIR]}"
cache="${2:-$HOME/.cache/lol/debs}"
here="$(cd "$(dirname "$0")" && pwd)"
for tool in apt-get dpkg-deb groff python3; do
  command -v "$tool" >/dev/null || { echo "multilingual.sh: needs $tool (bash scripts/setup.sh)" >&2; exit 1; }
done

# language label -> man page package suffix, LibreOffice help suffix ("-" = none)
languages=(
  "en -      en-us"
  "de de     de"
  "fr fr     fr"
  "es es     es"
  "it it     it"
  "nl nl     nl"
  "pl pl     pl"
  "pt pt-br  pt-br"
  "cs cs     cs"
  "tr tr     tr"
  "ru ru     ru"
  "uk uk     -"
  "el el     el"
  "ja ja     ja"
  "zh zh     zh-cn"
  "ko -      ko"
)

mkdir -p "$cache" "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

fetch() {  # package -> path of its .deb in the cache
  local deb
  deb=$(ls "$cache/$1"_*.deb 2>/dev/null | head -1 || true)
  if [ -z "$deb" ]; then
    (cd "$cache" && apt-get download -q "$1" >/dev/null 2>&1) ||
      { echo "multilingual.sh: apt-get download $1 failed (apt-get update? network?)" >&2; exit 1; }
    deb=$(ls "$cache/$1"_*.deb | head -1)
  fi
  echo "$deb"
}

unpack() {  # package -> directory it is unpacked in
  local dir="$work/$1"
  if [ ! -d "$dir" ]; then
    dpkg-deb -x "$(fetch "$1")" "$dir"
  fi
  echo "$dir"
}

: > "$work/packages.txt"
record() { dpkg-deb -f "$(fetch "$1")" Package Version | paste -sd' ' >> "$work/packages.txt"; }

english_help="$(unpack libreoffice-help-en-us)/usr/share/libreoffice/help/en-US"
for entry in "${languages[@]}"; do
  read -r lang man help <<<"$entry"
  rm -rf "${out:?}/$lang.tmp"
  mkdir -p "$out/$lang.tmp"
  if [ "$lang" = en ]; then
    dir="$(unpack manpages)"
    record manpages
    python3 "$here/extract.py" man en "$dir/usr/share/man" "$out/$lang.tmp"
  elif [ "$man" != - ]; then
    dir="$(unpack "manpages-$man")"
    record "manpages-$man"
    python3 "$here/extract.py" man "$lang" "$dir/usr/share/man" "$out/$lang.tmp"
  fi
  if [ "$help" != - ]; then
    dir="$(unpack "libreoffice-help-$help")"
    record "libreoffice-help-$help"
    src=$(find "$dir/usr/share/libreoffice/help" -mindepth 1 -maxdepth 1 -type d ! -name media | head -1)
    python3 "$here/extract.py" help "$lang" "$src" "$english_help" "$out/$lang.tmp"
  fi
  rm -rf "${out:?}/$lang"
  mv "$out/$lang.tmp" "$out/$lang"
  printf '%s: %s documents, %s bytes\n' "$lang" "$(ls "$out/$lang" | wc -l)" \
    "$(cat "$out/$lang"/*.txt | wc -c)"
done
sort -o "$out/packages.txt" "$work/packages.txt"
