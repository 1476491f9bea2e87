/**
 * @gw/testkit: throwaway redis-server and PostgreSQL on free loopback ports,
 * for tests. Dev only.
 */
export {
  findPostgresBinDir,
  findRedisServer,
  havePostgres,
  haveRedis,
  isCI,
  type KnownService,
  MissingBinaryError,
  requireBinary,
} from './binaries.js';
export { freePort } from './ports.js';
export { type PostgresServer, startPostgres } from './postgres.js';
export { pingRedis, type RedisServer, startRedis } from './redis.js';
