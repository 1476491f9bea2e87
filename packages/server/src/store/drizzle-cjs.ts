/**
 * Drizzle, loaded through require() rather than import.
 *
 * Node 24's ESM loader looks up the package scope of every module file it
 * loads, and for drizzle-orm (hundreds of files, a 178 KB package.json)
 * that deserialises the package.json hundreds of times: importing the
 * PostgreSQL driver made about 150 MB of garbage and left the process at
 * 290 MB resident before it served anything. The CommonJS build of the
 * same modules loads in 60 MB. Every drizzle module goes through here, so
 * one copy of its classes is in use.
 */
import { createRequire } from 'node:module';
import type * as Orm from 'drizzle-orm';
import type * as NodePg from 'drizzle-orm/node-postgres';
import type * as NodePgMigrator from 'drizzle-orm/node-postgres/migrator';
import type * as PgCore from 'drizzle-orm/pg-core';
import type * as PgProxy from 'drizzle-orm/pg-proxy';
import type * as PgProxyMigrator from 'drizzle-orm/pg-proxy/migrator';

const require = createRequire(import.meta.url);

export const orm = require('drizzle-orm') as typeof Orm;
export const pgCore = require('drizzle-orm/pg-core') as typeof PgCore;
export const pgProxy = require('drizzle-orm/pg-proxy') as typeof PgProxy;

/**
 * Each store's driver is loaded when that store opens: an embedded gateway never loads `pg` and its drizzle driver,
 * and one on PostgreSQL never loads the proxy's migrator (about 1 MB of heap each way, for the life of the process).
 */
export const loadNodePg = () => ({
  nodePg: require('drizzle-orm/node-postgres') as typeof NodePg,
  nodePgMigrator: require('drizzle-orm/node-postgres/migrator') as typeof NodePgMigrator,
});
export const loadPgProxyMigrator = () => require('drizzle-orm/pg-proxy/migrator') as typeof PgProxyMigrator;
