/**
 * drizzle-kit configuration. Generate a migration after changing
 * src/store/schema.ts (from packages/server):
 *
 *   npx drizzle-kit generate --name <what_changed>
 *
 * The SQL files and meta/ journal in ./drizzle are committed; the gateway
 * applies them at start (store.migrate()).
 */
import { defineConfig } from 'drizzle-kit';

export default defineConfig({
  dialect: 'postgresql',
  schema: './src/store/schema.ts',
  out: './drizzle',
  strict: true,
  verbose: true,
});
