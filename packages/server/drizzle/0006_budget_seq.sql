ALTER TABLE "api_keys" ADD COLUMN "budget_seq" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "workspaces" ADD COLUMN "budget_seq" integer DEFAULT 0 NOT NULL;