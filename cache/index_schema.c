/* The index schema: a static array of migration scripts, migration N at index N-1.
 *
 * Invariants the rest of cache/index.c relies on:
 * - Digests (cache keys, blob digests, source digests) are exactly 64 lowercase hex
 *   characters; the CHECKs below hold the database to that even against a bug in
 *   the C side's validation. A source's semantic_digest is '' when unknown.
 * - Unsigned C fields are stored as non-negative INTEGERs (index.c refuses values
 *   above INT64_MAX); booleans are 0 or 1.
 * - The WITHOUT ROWID tables are clustered on their text keys, so every secondary
 *   index carries the key as its last column: (pinned, last_access_ms) orders LRU
 *   scans fully, ties broken by key, with no sort step.
 * - Labels go with their artifact: ON DELETE CASCADE (index.c turns foreign_keys on
 *   for every connection).
 */
#include "cache/index_schema.h"

#include <stddef.h>

/* SQL fragment: `col` is a 64-character lowercase hex digest. */
#define DIGEST_CHECK(col) "CHECK (length(" col ") = 64 AND " col " NOT GLOB '*[^0-9a-f]*')"

static const char *const migrations[] = {
    /* 1: the initial schema. */
    "CREATE TABLE sources (\n"
    "  digest          TEXT    NOT NULL PRIMARY KEY " DIGEST_CHECK("digest") ",\n"
    "  semantic_digest TEXT    NOT NULL DEFAULT ''\n"
    "                  CHECK (semantic_digest = '' OR (length(semantic_digest) = 64 AND\n"
    "                         semantic_digest NOT GLOB '*[^0-9a-f]*')),\n"
    "  name            TEXT,\n"
    "  format          INTEGER NOT NULL DEFAULT 0,\n"
    "  size            INTEGER NOT NULL CHECK (size >= 0),\n"
    "  stored_size     INTEGER NOT NULL CHECK (stored_size >= 0),\n"
    "  created_ms      INTEGER NOT NULL,\n"
    "  last_access_ms  INTEGER NOT NULL,\n"
    "  pinned          INTEGER NOT NULL DEFAULT 0 CHECK (pinned IN (0, 1))\n"
    ") WITHOUT ROWID;\n"
    "CREATE INDEX sources_by_semantic_digest ON sources (semantic_digest);\n"
    "CREATE INDEX sources_by_lru ON sources (pinned, last_access_ms);\n"
    "\n"
    "CREATE TABLE artifacts (\n"
    "  cache_key        TEXT    NOT NULL PRIMARY KEY " DIGEST_CHECK("cache_key") ",\n"
    "  artifact_digest  TEXT    NOT NULL " DIGEST_CHECK("artifact_digest") ",\n"
    "  source_digest    TEXT    NOT NULL " DIGEST_CHECK("source_digest") ",\n"
    "  target           TEXT    NOT NULL CHECK (target <> ''),\n"
    "  flags            TEXT    NOT NULL DEFAULT '',\n"
    "  compiler         TEXT    NOT NULL CHECK (compiler <> ''),\n"
    "  hal_version      INTEGER NOT NULL CHECK (hal_version BETWEEN 0 AND 4294967295),\n"
    "  bytecode_version INTEGER NOT NULL CHECK (bytecode_version BETWEEN 0 AND 4294967295),\n"
    "  size             INTEGER NOT NULL CHECK (size >= 0),\n"
    "  stored_size      INTEGER NOT NULL CHECK (stored_size >= 0),\n"
    "  submitter        TEXT,\n"
    "  created_ms       INTEGER NOT NULL,\n"
    "  last_access_ms   INTEGER NOT NULL,\n"
    "  hits             INTEGER NOT NULL DEFAULT 0 CHECK (hits >= 0),\n"
    "  pinned           INTEGER NOT NULL DEFAULT 0 CHECK (pinned IN (0, 1))\n"
    ") WITHOUT ROWID;\n"
    "CREATE INDEX artifacts_by_digest ON artifacts (artifact_digest);\n"
    "CREATE INDEX artifacts_by_source_target ON artifacts (source_digest, target);\n"
    "CREATE INDEX artifacts_by_lru ON artifacts (pinned, last_access_ms);\n"
    "\n"
    "CREATE TABLE artifact_labels (\n"
    "  cache_key TEXT NOT NULL REFERENCES artifacts (cache_key) ON DELETE CASCADE,\n"
    "  key       TEXT NOT NULL CHECK (key <> ''),\n"
    "  value     TEXT NOT NULL,\n"
    "  PRIMARY KEY (cache_key, key)\n"
    ") WITHOUT ROWID;\n"
    "\n"
    "CREATE TABLE quarantine (\n"
    "  digest         TEXT    NOT NULL PRIMARY KEY " DIGEST_CHECK("digest") ",\n"
    "  reason         TEXT    NOT NULL,\n"
    "  quarantined_ms INTEGER NOT NULL\n"
    ") WITHOUT ROWID;\n",
    /* 2: FindArtifacts pages newest first (created_ms descending, then digest and
     * key): this index gives that order without a sort, so a page costs its own
     * rows, not a scan of the table. */
    "CREATE INDEX artifacts_by_created ON artifacts\n"
    "  (created_ms DESC, artifact_digest, cache_key);\n",
    /* 3: provenance of a compiled artifact: the job that produced it and the
     * source_name of its request ('' when unknown: rows from before this
     * migration, imported VMFBs). */
    "ALTER TABLE artifacts ADD COLUMN job_id TEXT NOT NULL DEFAULT '';\n"
    "ALTER TABLE artifacts ADD COLUMN source_name TEXT NOT NULL DEFAULT '';\n",
    /* 4: each blob's check, which every streaming read verifies instead of
     * SHA-256: the XXH3-128 of its uncompressed content, 16 bytes in xxHash's
     * canonical (big-endian) order, keyed by the blob's digest. Written in the
     * transaction that writes the row naming the blob; blobs stored before this
     * migration get theirs from the first read (or verify) that hashes them with
     * SHA-256. Not a foreign key: one blob may be named by artifact and source rows
     * alike. */
    "CREATE TABLE blob_checks (\n"
    "  digest TEXT NOT NULL PRIMARY KEY " DIGEST_CHECK("digest") ",\n"
    "  xxh3   BLOB NOT NULL CHECK (length(xxh3) = 16)\n"
    ") STRICT, WITHOUT ROWID;\n",
};

int kiln_index_schema_migration_count(void) { return (int)(sizeof migrations / sizeof migrations[0]); }

const char *kiln_index_schema_migration(int version) {
  if (version < 1 || version > kiln_index_schema_migration_count()) return NULL;
  return migrations[version - 1];
}
