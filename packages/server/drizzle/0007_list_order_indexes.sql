DROP INDEX "api_keys_workspace_idx";--> statement-breakpoint
CREATE INDEX "api_keys_created_idx" ON "api_keys" USING btree ("created_at","id");--> statement-breakpoint
CREATE INDEX "api_keys_workspace_created_idx" ON "api_keys" USING btree ("workspace_id","created_at","id");--> statement-breakpoint
CREATE INDEX "workspaces_created_idx" ON "workspaces" USING btree ("created_at","id");