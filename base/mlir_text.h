/* The digest of an MLIR model's lexical normal form: what kiln's cache keys on
 * (docs/design/cache.md, Keys), so that a model reformatted, commented, renamed
 * or stripped of its locations still hits.
 *
 * kilnd never parses IR in its own process (a hostile model may crash a parser;
 * workers take that risk), and a client must be able to compute the same digest
 * from a file (kiln explain, kiln fetch --source FILE), so the normal form is
 * lexical, a single linear scan with no MLIR:
 *   - whitespace and `//` comments go; one space is kept only between two word
 *     characters ([A-Za-z0-9_$.]), so the form re-reads as the same tokens;
 *   - SSA value names (%name) and block labels (^name) are renumbered in order
 *     of first appearance (%0, %1, ... and ^0, ^1, ...): a consistent renaming
 *     does not change what any use refers to; a result index (%x#1) is kept;
 *   - locations go: every `loc(...)` (balanced, strings respected) and every
 *     location alias definition (#loc3 = loc(...));
 *   - string literals are kept byte for byte; everything else is kept as written
 *     (a different number spelling, the generic form or a renamed attribute alias
 *     is a different form: a miss, never a wrong hit).
 * MLIR bytecode (it starts "ML\xefR") is hashed as it is. The digest is SHA-256
 * over "kiln-mlir-normal/1\n" and the form, so it never equals the digest of
 * any file's bytes. Thread-safe; memory: the renaming tables, O(names). */
#ifndef KILN_BASE_MLIR_TEXT_H
#define KILN_BASE_MLIR_TEXT_H

#include <stddef.h>

#include "base/buf.h"
#include "base/digest.h"

/* Writes the normal form of `len` bytes (tests and `kiln explain` show it). */
void kiln_mlir_text_normalize(const void *data, size_t len, kiln_buf_t *out);

/* The digest of the normal form of `len` bytes (of bytecode: of the bytes). */
void kiln_mlir_text_digest(const void *data, size_t len, kiln_digest_hex_t *out);

#endif /* KILN_BASE_MLIR_TEXT_H */
