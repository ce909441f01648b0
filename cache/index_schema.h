/* The index schema as numbered migrations. Internal to cache/: only index.c
 * applies them (see index.h for how).
 *
 * Migration N (1-based) brings a database from user_version N-1 to N. Migrations
 * are append-only: once released, a migration's text never changes, because
 * databases in the field have already run it; a schema change is a new migration.
 * Thread-safe: static data.
 */
#ifndef KILN_CACHE_INDEX_SCHEMA_H
#define KILN_CACHE_INDEX_SCHEMA_H

/* The number of migrations this build knows: the user_version of a fresh database. */
int kiln_index_schema_migration_count(void);

/* The SQL script of migration `version` (1 .. count): one or more statements, without
 * transaction control or the user_version pragma (the caller adds both). NULL when
 * `version` is out of range. Static storage. */
const char *kiln_index_schema_migration(int version);

#endif /* KILN_CACHE_INDEX_SCHEMA_H */
