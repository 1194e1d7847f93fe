#!/bin/sh
# The core's public archive (docs/decisions/0161): every object of libshard-ckpt.a,
# built with hidden visibility, linked into one relocatable object whose hidden
# symbols (all but the CK_API functions of libshard/include/ck/) are then made local.
# A program or library that links it can call the public API and nothing else: a
# private function it names, by a private header or a prototype of its own, is an
# undefined symbol at its link.
#   public-archive.sh OUT.a IN.a LD OBJCOPY AR
set -e
out=$1 in=$2 ld=$3 objcopy=$4 ar=$5
obj=${out%.a}.o
"$ld" -r -o "$obj" --whole-archive "$in"
"$objcopy" --localize-hidden "$obj"
rm -f "$out"
"$ar" rcs "$out" "$obj"
rm -f "$obj"
