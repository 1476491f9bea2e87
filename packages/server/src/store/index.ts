export { DrizzleStore, USAGE_LIST_DEFAULT_LIMIT, USAGE_LIST_MAX_LIMIT } from './drizzle-store.js';
export { MIGRATIONS_FOLDER, type OpenStoreOptions, openStore } from './open.js';
export * from './types.js';
