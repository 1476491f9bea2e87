CREATE TABLE "api_keys" (
	"id" text PRIMARY KEY NOT NULL,
	"name" text,
	"workspace_id" text,
	"hash" text NOT NULL,
	"rate_limit_rpm" integer NOT NULL,
	"budget" numeric(24, 12),
	"spent" numeric(24, 12) DEFAULT 0 NOT NULL,
	"revoked" boolean DEFAULT false NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "settings" (
	"name" text PRIMARY KEY NOT NULL,
	"value" text NOT NULL
);
--> statement-breakpoint
CREATE TABLE "usage_records" (
	"request_id" text PRIMARY KEY NOT NULL,
	"key_id" text NOT NULL,
	"workspace_id" text,
	"kind" text NOT NULL,
	"model" text NOT NULL,
	"provider" text,
	"prompt_tokens" integer NOT NULL,
	"completion_tokens" integer NOT NULL,
	"total_tokens" integer NOT NULL,
	"units" double precision DEFAULT 0 NOT NULL,
	"cost" numeric(24, 12) NOT NULL,
	"latency_ms" integer NOT NULL,
	"status" integer NOT NULL,
	"error_code" text,
	"streamed" boolean NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "workspaces" (
	"id" text PRIMARY KEY NOT NULL,
	"name" text NOT NULL,
	"enabled_models" jsonb,
	"budget" numeric(24, 12),
	"spent" numeric(24, 12) DEFAULT 0 NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "api_keys" ADD CONSTRAINT "api_keys_workspace_id_workspaces_id_fk" FOREIGN KEY ("workspace_id") REFERENCES "public"."workspaces"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "api_keys_hash_uq" ON "api_keys" USING btree ("hash");--> statement-breakpoint
CREATE INDEX "api_keys_workspace_idx" ON "api_keys" USING btree ("workspace_id");--> statement-breakpoint
CREATE INDEX "usage_records_key_created_idx" ON "usage_records" USING btree ("key_id","created_at");--> statement-breakpoint
CREATE INDEX "usage_records_workspace_created_idx" ON "usage_records" USING btree ("workspace_id","created_at");